"""run.json records, per adapter, the CPU instruction-set flags that change integer results
(VNNI, AMX, AVX-512), read from /proc/cpuinfo where the adapter ran (harness/cpu_flags.py)."""

from __future__ import annotations

from harness import runner
from harness.adapters.reference import Reference
from harness.cpu_flags import CPUINFO, cpu_flags, parse
from harness.report.run_json import run_record
from harness.spec import Case

X86 = ("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni "
       "amx_tile amx_int8\nprocessor\t: 1\nflags\t\t: fpu\n")
ARM = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n"


def test_families_from_the_first_flags_line():
    x86 = parse(X86)
    assert x86["vnni"] and x86["amx"] and x86["avx512"] and x86["avx2"]
    assert not x86["arm_dotprod"]
    assert x86["flags"] == ["amx_int8", "amx_tile", "avx2", "avx512_vnni", "avx512bw",
                            "avx512f", "fma"]
    arm = parse(ARM)
    assert arm["arm_dotprod"] and arm["arm_i8mm"] and not arm["vnni"]
    assert "no flags line" in parse("processor : 0\n")["source"]


def test_run_json_has_each_adapters_cpu_flags():
    case = Case(name="tiny", cell="gru", input_size=2, hidden_size=3, batch=2, seq_len=3)
    doc = run_record(runner.run([case], [Reference()])).model_dump(mode="json")
    recorded = doc["adapters"]["reference"]["environment"]["cpu_flags"]
    assert recorded == cpu_flags()
    if CPUINFO.exists():
        assert set(recorded) >= {"vnni", "amx", "avx512", "flags"}
