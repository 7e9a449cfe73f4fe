// One time step of the LSTM and GRU equations (harness/reference/lstm.py, gru.py and their
// *_backward.py), fused: every element-wise operation of a step in one kernel, so a step costs
// one cuBLAS product and one launch instead of the ~20 small kernels of the generic reference.
// harness/reference/fast_cuda.py launches these (CuPy RawKernel) and does the products.
//
// Scope: float64, the recurrent activation sigmoid, no peepholes, projection, clips, forget
// bias or input_forget (fast_cuda.py falls back to the generic reference for those).
//
// Layouts (row-major, time-major, one direction in its reading order):
//   gates   [T, B, G*H]  the pre-activations of step t in (Wx_t + the recurrent product), the
//                        gate values out (i f g o; r z n): what the backward reads
//   h_states, c_states [T+1, B, H]: [0] the initial state, [t+1] the state after step t (held
//                        past a sequence's length, as the reference's xp.where)
//   y       [T, B, H]    zero past a sequence's length
// One thread per (b, j) of [B, H]; step t's rows start at t * B * H.
//
// Each operation is written as the reference's, in its order: the module is compiled with
// --fmad=false so that a * b + c stays two roundings (NumPy's), not one fused multiply-add.

#define VALID(t, b) ((long long)(t) < lengths[b])  // the reference's `valid`: t < length

__device__ __forceinline__ double sigmoid(double x) {
    // harness/reference/functions.py sigmoid: 1 / (1 + exp(-x))
    return 1.0 / (1.0 + exp(-x));
}

extern "C" __global__ void lstm_step(
    double* gates, double* c_states, double* h_states, double* y,
    const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    double* a = gates + ((long long)t * B + b) * 4 * H;
    long long s = (long long)t * B * H + idx, s1 = s + (long long)B * H;  // [t, b, j], [t + 1, b, j]

    double i = sigmoid(a[j]);
    double f = sigmoid(a[H + j]);
    double g = tanh(a[2 * H + j]);
    double o = sigmoid(a[3 * H + j]);
    double c_prev = c_states[s];
    double c = f * c_prev + i * g;
    double h = o * tanh(c);
    bool valid = VALID(t, b);
    c_states[s1] = valid ? c : c_prev;
    h_states[s1] = valid ? h : h_states[s];
    y[s] = valid ? h : 0.0;
    a[j] = i; a[H + j] = f; a[2 * H + j] = g; a[3 * H + j] = o;
}

// dh [B, H] in: dL/dh from the step after (the upstream dy excluded); out: 0 at a valid step
// (the cuBLAS product that follows adds dA_t R with beta = 1), unchanged at a padded one (the
// state is held there, so its gradient passes: the product adds a zero row).
extern "C" __global__ void lstm_step_backward(
    const double* gates, const double* c_states, const double* dy, double* dh, double* dc,
    double* dA, const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    long long row = ((long long)t * B + b) * 4 * H;
    double* da = dA + row;
    if (!VALID(t, b)) {
        da[j] = 0.0; da[H + j] = 0.0; da[2 * H + j] = 0.0; da[3 * H + j] = 0.0;
        return;
    }
    const double* act = gates + row;
    long long s = (long long)t * B * H + idx, s1 = s + (long long)B * H;
    double i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
    double c_prev = c_states[s];
    double tanh_c = tanh(c_states[s1]);  // c at a valid step: the forward's tanh, recomputed

    double dh_t = dh[idx] + dy[s];
    double d_o = dh_t * tanh_c;
    double da_o = d_o * (o * (1.0 - o));
    double dc_new = dc[idx] + (dh_t * o) * (1.0 - tanh_c * tanh_c);
    double da_i = (dc_new * g) * (i * (1.0 - i));
    double da_f = (dc_new * c_prev) * (f * (1.0 - f));
    double da_g = (dc_new * i) * (1.0 - g * g);
    dc[idx] = dc_new * f;
    dh[idx] = 0.0;
    da[j] = da_i; da[H + j] = da_f; da[2 * H + j] = da_g; da[3 * H + j] = da_o;
}

// GRU, reset_after (cuDNN, PyTorch): rec [B, 3H] = h_prev Rᵀ (the step's product); u [T, B, H]
// keeps R_n h + bR_n for the backward.
extern "C" __global__ void gru_step_after(
    double* gates, const double* rec, const double* bR, double* u, double* h_states, double* y,
    const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    double* a = gates + ((long long)t * B + b) * 3 * H;
    const double* Rh = rec + (long long)b * 3 * H;
    long long s = (long long)t * B * H + idx, s1 = s + (long long)B * H;

    double r = sigmoid(a[j] + (Rh[j] + bR[j]));
    double z = sigmoid(a[H + j] + (Rh[H + j] + bR[H + j]));
    double u_t = Rh[2 * H + j] + bR[2 * H + j];
    double n = tanh(a[2 * H + j] + r * u_t);
    double h_prev = h_states[s];
    double h = (1.0 - z) * n + z * h_prev;
    bool valid = VALID(t, b);
    h_states[s1] = valid ? h : h_prev;
    y[s] = valid ? h : 0.0;
    u[s] = u_t;
    a[j] = r; a[H + j] = z; a[2 * H + j] = n;
}

// GRU, reset_before (Keras reset_after=False, ONNX linear_before_reset=0), in two kernels around
// the product u R_nᵀ, which needs r: first r, z and u = r ⊙ h_prev from rec [B, 2H] = h_prev
// [R_r; R_z]ᵀ ...
extern "C" __global__ void gru_step_before_rz(
    double* gates, const double* rec, const double* bR, double* u, const double* h_states,
    int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    double* a = gates + ((long long)t * B + b) * 3 * H;
    const double* Rh = rec + (long long)b * 2 * H;
    long long s = (long long)t * B * H + idx;

    double r = sigmoid(a[j] + (Rh[j] + bR[j]));
    double z = sigmoid(a[H + j] + (Rh[H + j] + bR[H + j]));
    u[s] = r * h_states[s];
    a[j] = r; a[H + j] = z;
}

// ... then n and the state from rec_n [B, H] = u R_nᵀ.
extern "C" __global__ void gru_step_before_n(
    double* gates, const double* rec_n, const double* bR, double* h_states, double* y,
    const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    double* a = gates + ((long long)t * B + b) * 3 * H;
    long long s = (long long)t * B * H + idx, s1 = s + (long long)B * H;

    double n = tanh(a[2 * H + j] + (rec_n[idx] + bR[2 * H + j]));
    double z = a[H + j];
    double h_prev = h_states[s];
    double h = (1.0 - z) * n + z * h_prev;
    bool valid = VALID(t, b);
    h_states[s1] = valid ? h : h_prev;
    y[s] = valid ? h : 0.0;
    a[2 * H + j] = n;
}

// GRU backward, reset_after. dA [T, B, 3H] = [da_r da_z da_n] (dW, dbW, dx); d_rec [T, B, 3H]
// = [da_r da_z da_n ⊙ r] (the recurrent side: dR = d_recᵀ H_prev, dbR, and dh += d_rec_t R).
// dh as in lstm_step_backward, out dh_t ⊙ z at a valid step.
extern "C" __global__ void gru_step_backward_after(
    const double* gates, const double* u, const double* h_states, const double* dy, double* dh,
    double* dA, double* d_rec, const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    long long row = ((long long)t * B + b) * 3 * H;
    double* da = dA + row;
    double* dr_ = d_rec + row;
    if (!VALID(t, b)) {
        da[j] = 0.0; da[H + j] = 0.0; da[2 * H + j] = 0.0;
        dr_[j] = 0.0; dr_[H + j] = 0.0; dr_[2 * H + j] = 0.0;
        return;
    }
    const double* act = gates + row;
    long long s = (long long)t * B * H + idx;
    double r = act[j], z = act[H + j], n = act[2 * H + j];
    double h_prev = h_states[s];

    double dh_t = dh[idx] + dy[s];
    double dn = dh_t * (1.0 - z);
    double dz = dh_t * (h_prev - n);
    double da_n = dn * (1.0 - n * n);
    double da_z = dz * (z * (1.0 - z));
    double dr = da_n * u[s];
    double dn_rec = da_n * r;
    double da_r = dr * (r * (1.0 - r));
    dh[idx] = dh_t * z;
    da[j] = da_r; da[H + j] = da_z; da[2 * H + j] = da_n;
    dr_[j] = da_r; dr_[H + j] = da_z; dr_[2 * H + j] = dn_rec;
}

// GRU backward, reset_before, in two kernels around du = da_n R_n: first z and n's part
// (da_n also into da_n_t [B, H], the product's contiguous operand), dh out dh_t ⊙ z ...
extern "C" __global__ void gru_step_backward_before_zn(
    const double* gates, const double* h_states, const double* dy, double* dh, double* dA,
    double* da_n_t, const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    long long row = ((long long)t * B + b) * 3 * H;
    double* da = dA + row;
    if (!VALID(t, b)) {
        da[H + j] = 0.0; da[2 * H + j] = 0.0;
        da_n_t[idx] = 0.0;
        return;
    }
    const double* act = gates + row;
    long long s = (long long)t * B * H + idx;
    double z = act[H + j], n = act[2 * H + j];
    double h_prev = h_states[s];

    double dh_t = dh[idx] + dy[s];
    double dn = dh_t * (1.0 - z);
    double dz = dh_t * (h_prev - n);
    double da_n = dn * (1.0 - n * n);
    double da_z = dz * (z * (1.0 - z));
    dh[idx] = dh_t * z;
    da[H + j] = da_z; da[2 * H + j] = da_n;
    da_n_t[idx] = da_n;
}

// ... then r's part from du [B, H]; d_rz [B, 2H] = [da_r da_z], the operand of dh += d_rz
// [R_r; R_z].
extern "C" __global__ void gru_step_backward_before_r(
    const double* gates, const double* h_states, const double* du, double* dh, double* dA,
    double* d_rz, const long long* lengths, int t, int B, int H)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * H) return;
    int b = idx / H, j = idx - b * H;
    long long row = ((long long)t * B + b) * 3 * H;
    double* da = dA + row;
    double* drz = d_rz + (long long)b * 2 * H;
    if (!VALID(t, b)) {
        da[j] = 0.0;
        drz[j] = 0.0; drz[H + j] = 0.0;
        return;
    }
    const double* act = gates + row;
    long long s = (long long)t * B * H + idx;
    double r = act[j];

    double dr = du[idx] * h_states[s];
    dh[idx] = dh[idx] + du[idx] * r;
    double da_r = dr * (r * (1.0 - r));
    da[j] = da_r;
    drz[j] = da_r; drz[H + j] = da[H + j];
}
