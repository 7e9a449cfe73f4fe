"""Gradient cases in the report: summary.md, index.html and the plots show the gradient rows.

A small real run (reference, noise-floor, torch-cpu and a torch adapter without a backward
pass) on tiny gradient cases: a 2-layer bidirectional stack with variable lengths (LSTM and
GRU, float64), an LSTM with a projection in float32, a case whose tolerance override makes
torch-cpu's gradients DIVERGED, and a forward-only case (no gradient rows, no extra column).
"""

from __future__ import annotations

import dataclasses
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import adapters as registry
from harness import compare, runner
from harness.adapters.torch_cpu import TorchCPU
from harness.cases import discover
from harness.report import plots, write_report
from harness.report.plots import error_plot, gradient_blocks, gradient_plot
from harness.results import PairResult

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("matplotlib")

CASES = {
    "gstack.yaml": """
name: gstack
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
batch: 3
seq_len: 5
seq_lengths: [5, 3, 1]
initial_state: random
dtype: float64
seed: 41
gradients: true
matrix:
  cell: [lstm, gru]
""",
    "gproj.yaml": """
name: gproj
cell: lstm
input_size: 3
hidden_size: 5
proj_size: 2
batch: 2
seq_len: 4
initial_state: random
dtype: float32
seed: 42
gradients: true
""",
    "gtight.yaml": """
name: gtight
cell: gru
input_size: 2
hidden_size: 3
batch: 2
seq_len: 4
dtype: float64
seed: 43
gradients: true
tolerance: {adapters: {torch-cpu: {atol: 1.0e-30, rtol: 0}}}
""",
    "fwd.yaml": """
name: fwd
cell: lstm
input_size: 3
hidden_size: 4
batch: 2
seq_len: 4
dtype: float64
seed: 44
""",
}
NO_BACKWARD = "torch without a backward pass (test)"
PNG = b"\x89PNG\r\n\x1a\n"


class ForwardOnly(TorchCPU):
    """torch-cpu's forward pass under another name, declaring no backward pass."""

    name = "torch-forward-only"
    capabilities = dataclasses.replace(
        TorchCPU.capabilities, gradients=False,
        reasons={**TorchCPU.capabilities.reasons, "gradients": NO_BACKWARD})


class Cells(HTMLParser):
    """The text of every table cell and the src of every image of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.images: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("gradreport")
    (root / "cases").mkdir()
    for name, text in CASES.items():
        (root / "cases" / name).write_text(text)
    chosen = registry.select(["reference", "noise-floor", "torch-cpu"]) + [ForwardOnly()]
    result = runner.run(discover([root / "cases"]), chosen)
    out = write_report(result, root / "report", plots="all")
    return result, out


def pairs(result) -> dict[tuple[str, str], PairResult]:
    return {(p.case, p.adapter): p for p in result.pairs}


def section(markdown: str, case: str) -> str:
    return markdown.split(f"\n## {case}\n")[1].split("\n## ")[0]


def table_row(markdown: str, case: str, adapter: str) -> dict[str, str]:
    """One adapter's row of a case's summary.md table, by column name."""
    lines = [s for s in section(markdown, case).splitlines() if s.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == adapter:
            return dict(zip(head, cells, strict=True))
    raise AssertionError(f"no row for {adapter} in {case}")


def test_torch_gradients_match_the_reference(report):
    result, _ = report
    by = pairs(result)
    for case in ("gstack-lstm", "gstack-gru", "gproj"):
        p = by[(case, "torch-cpu")]
        assert p.status == compare.PASS and p.reason == ""
        outputs = set(p.rows["output"])
        assert {"dx", "dh0", "dW_i" if case != "gstack-gru" else "dW_r"} <= outputs
        grads = p.rows[~p.rows["output"].isin(compare.FORWARD)]
        assert grads["max_abs"].max() < (1e-12 if case.startswith("gstack") else 1e-5)
    rows = by[("gstack-lstm", "torch-cpu")].rows
    assert len(rows[rows["output"] == "dx"]) == 5 and rows.loc[rows["output"] == "dx",
                                                              "direction"].isna().all()
    assert len(rows[rows["output"] == "dc0"]) == 4  # 2 layers x 2 directions
    assert len(rows[rows["output"] == "dbR_o"]) == 4
    assert "dWp" in set(by[("gproj", "torch-cpu")].rows["output"])
    assert by[("gtight", "torch-cpu")].status == compare.DIVERGED


def test_summary_has_a_worst_gradient_column_for_gradient_cases(report):
    result, out = report
    text = (out / "summary.md").read_text()
    by = pairs(result)
    for case in ("gstack-lstm", "gstack-gru", "gproj"):
        row = table_row(text, case, "torch-cpu")
        grads = by[(case, "torch-cpu")].rows
        grads = grads[~grads["output"].isin(compare.FORWARD)]
        w = grads.loc[grads["tol_ratio"].idxmax()]
        assert row["worst gradient"].startswith(f"{w['max_abs']:.2e} ({compare.where(w)},")
        # the forward column stays the worst of y, h_n, c_n
        assert re.search(r"\((y|h_n|c_n), ", row["worst max_abs"])
    tight = table_row(text, "gtight", "torch-cpu")
    assert tight["verdict"] == "DIVERGED" and tight["first diverging"]
    assert re.search(r"\(d\w+ L0[^,]*, [\d.e+]+x tol\)", tight["worst gradient"])
    # an adapter without a backward pass: forward compared, the note in its reason
    fwd_only = table_row(text, "gstack-lstm", "torch-forward-only")
    assert fwd_only["verdict"] == "pass" and fwd_only["worst gradient"] == ""
    assert fwd_only["reason"] == f"gradients not applicable ({NO_BACKWARD}); forward compared only"
    assert "gradients" in section(text, "gstack-lstm").splitlines()[1]
    # a case without gradients has no gradient column
    assert "worst gradient" not in section(text, "fwd")


def test_html_shows_gradient_plots_and_tables(report):
    """With ``plots="all"`` every gradient pair's gradient plots, and each one's table."""
    result, out = report
    html = (out / "index.html").read_text()
    page = Cells()
    page.feed(html)
    for case in ("gstack-lstm", "gproj", "gtight"):
        for kind in ("grad", "grad-blocks"):
            src = [s for s in page.images if s.endswith(f"-{case}--torch-cpu-{kind}.png")]
            assert len(src) == 1, (case, kind, page.images)
            assert (out / src[0]).read_bytes()[:8] == PNG
    assert not [s for s in page.images if "torch-forward-only-grad" in s]
    assert not [s for s in page.images if "--fwd--" in s and "-grad" in s]
    # the table of the worst row of each gradient output, with its place and numbers
    rows = pairs(result)[("gstack-lstm", "torch-cpu")].rows
    sec = html.split('id="case-gstack-lstm"')[1].split("</section>")[0]
    table = Cells()
    table.feed(sec.split("<summary>torch-cpu: gradient rows")[1].split("</details>")[0])
    assert len(table.cells) == 8 * (1 + rows["output"].nunique() - 3)  # header + a row each
    for output in ("dx", "dh0", "dc0", "dW_i", "dR_f", "dbW_g", "dbR_o"):
        part = rows[rows["output"] == output]
        w = part.loc[part["tol_ratio"].idxmax()]
        i = table.cells.index(output)
        assert table.cells[i + 1:i + 3] == [compare.where(w), f"{w['max_abs']:.2e}"]
        assert table.cells[i + 7] == "pass"
    assert "worst gradient" in page.cells
    assert "gtight" in html and "<details open><summary>torch-cpu: gradient rows" in html
    # the forward-only note is visible in the case table and marked in the overview
    assert f"gradients not applicable ({NO_BACKWARD}); forward compared only" in page.cells
    # (a float64 pass gives its error in ulp, others in units of the tolerance)
    assert re.search(r"pass(, [\d.e+-]+ ulp|<br>[\d.e+-]+× tol)<br>\(forward only\)", html)


def test_plots_take_gradient_rows_without_direction(report, tmp_path):
    result, _ = report
    rows = pairs(result)[("gtight", "torch-cpu")].rows  # DIVERGED rows: red crosses everywhere
    assert rows["direction"].isna().any()
    assert error_plot(rows, tmp_path / "a.png", "x")  # gradient rows left out, no crash
    assert gradient_plot(rows, tmp_path / "b.png", "x")
    assert gradient_blocks(rows, tmp_path / "c.png", "x")
    forward = rows[rows["output"].isin(compare.FORWARD)]
    assert not gradient_plot(forward, tmp_path / "d.png", "x")
    assert not gradient_blocks(forward, tmp_path / "e.png", "x")
    zero = rows.assign(max_abs=0.0)
    assert not gradient_plot(zero, tmp_path / "f.png", "x")
    assert not gradient_blocks(zero, tmp_path / "g.png", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png", "c.png"]
    # rows read back from divergence.csv (missing t / direction as NaN) plot the same way
    csv = pd.read_csv(io.StringIO(rows.to_csv(index=False)))
    assert np.isnan(csv["direction"]).any()
    assert gradient_plot(csv, tmp_path / "h.png", "x")


def images(folder: Path) -> list[str]:
    page = Cells()
    page.feed((folder / "index.html").read_text())
    return page.images


def pair_of(src: str) -> tuple[str, str]:
    """The case and adapter a plot's file name names (``NNN-case--adapter[-kind].png``)."""
    case, adapter = re.sub(r"^\d+-", "", Path(src).stem).split("--")
    return case, re.sub(r"-(layers|grad|grad-blocks)$", "", adapter)


def test_by_default_only_the_pairs_that_did_not_pass_are_drawn(report, tmp_path):
    result, _ = report
    out = write_report(result, tmp_path / "default")
    failing = {(p.case, p.adapter) for p in result.pairs
               if p.status in (compare.DIVERGED, compare.ERROR) and p.has_rows}
    assert failing == {("gtight", "torch-cpu")}
    srcs = images(out)
    assert {pair_of(s) for s in srcs} == failing
    assert sorted(re.sub(r"^\d+-", "", Path(s).name) for s in srcs) == [
        "gtight--torch-cpu-grad-blocks.png", "gtight--torch-cpu-grad.png",
        "gtight--torch-cpu.png"]
    assert sorted(f"plots/{f.name}" for f in (out / "plots").iterdir()) == sorted(srcs)
    html = (out / "index.html").read_text()
    assert ("Plots: the 1 pair that did not pass (run with <code>--plots all</code> for every "
            "pair).") in html
    # the passing pairs keep their gradient tables
    assert "<summary>torch-cpu: gradient rows" in html.split('id="case-gstack-lstm"')[1]


def test_plots_all_draws_every_pair_with_rows(report):
    result, out = report
    srcs = images(out)
    with_rows = {(p.case, p.adapter): p.rows for p in result.pairs if p.has_rows}
    nonzero = {k for k, rows in with_rows.items() if (rows["max_abs"] > 0).any()}
    assert nonzero < set(with_rows)  # noise-floor's float64 rows: exactly 0, nothing to draw
    assert {pair_of(s) for s in srcs} == nonzero
    assert sorted(f"plots/{f.name}" for f in (out / "plots").iterdir()) == sorted(srcs)
    html = (out / "index.html").read_text()
    assert f"Plots: every pair with divergence rows ({len(with_rows)})." in html
    assert html.count("every forward error is exactly 0.") == len(with_rows) - len(nonzero)


def test_plot_pngs_are_images_of_the_figure_size(report):
    from PIL import Image

    _, out = report
    srcs = images(out)
    assert srcs
    for src in srcs:
        with Image.open(out / src) as image:
            image.verify()  # a whole, valid PNG
        with Image.open(out / src) as image:
            width, height = image.size
            assert width == plots.WIDTH * plots.DPI, src
            assert 100 <= height <= 800, src
            extrema = image.convert("L").getextrema()
            assert extrema[0] < 60 and extrema[1] > 240, src  # dark text on a light page
    # a small error plot: the figure's default height
    src = next(s for s in srcs if s.endswith("-gproj--torch-cpu.png"))
    with Image.open(out / src) as image:
        assert image.size == (900, 340)


def deep_stack_rows(layers: int = 5) -> pd.DataFrame:
    """Rows of a bidirectional stack of ``layers`` layers, forward and gradients, some beyond
    tolerance."""
    rng = np.random.default_rng(7)
    rows = []
    for la in range(layers):
        for d in (0, 1):
            rows += [("y", la, d, t) for t in range(6)]
            rows += [(o, la, d, None) for o in ("h_n", "c_n", "dh0", "dc0", "dW_i", "dR_f")]
    rows += [("dx", 0, None, t) for t in range(6)]
    frame = pd.DataFrame(rows, columns=["output", "layer", "direction", "t"])
    for c in ("direction", "t"):
        frame[c] = frame[c].astype("Int64")
    n = len(frame)
    return frame.assign(max_abs=10.0 ** rng.uniform(-9, -5, n), noise_floor=1e-8, atol=1e-6,
                        rtol=1e-6, verdict=np.where(rng.random(n) < 0.2, "DIVERGED", "pass"))


def test_a_deep_stack_gets_taller_plots_of_the_same_width(tmp_path):
    """A legend entry per line and per final-state marker: a 5-layer bidirectional stack's
    legend (10 lines, 20 markers) makes its plot taller, its heatmaps a row per slice."""
    from PIL import Image

    drawn = plots.draw_pair(deep_stack_rows(), tmp_path, "deep", "deep")
    assert drawn == (True, True, True, True)
    small = plots.draw_pair(deep_stack_rows(1), tmp_path, "one", "one")
    assert small == (True, False, True, True)  # one layer: no layer x timestep map
    sizes = {}
    for f in tmp_path.iterdir():
        with Image.open(f) as image:
            sizes[f.name] = image.size
    assert {w for w, _ in sizes.values()} == {900}
    for kind in ("", "-grad", "-grad-blocks"):
        assert sizes[f"deep{kind}.png"][1] > sizes[f"one{kind}.png"][1], kind
