"""index.html and the other reports people read (JUnit XML of the pytest-driven runs).

A small real run (reference, noise-floor, torch-cpu) on tiny cases: a 2-layer bidirectional
stack with variable lengths (per-layer rows, so a heatmap), a case whose tolerance override
makes torch-cpu DIVERGED, and a reverse-only case torch cannot express (no rows, no plot). The
page is checked as HTML, then opened in headless Chromium (skipped, with the reason, where
Chromium is not installed; .ci/run installs it from Debian's packages).
"""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from harness import adapters as registry
from harness import compare, runner
from harness.cases import discover
from harness.report import write_report
from harness.report.html import markdown_tables_html
from harness.report.plots import error_plot, layer_heatmap
from harness.results import PairResult, RunResult

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ["reference", "noise-floor", "torch-cpu"]
CASES = {
    "stack.yaml": """
name: stack
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
batch: 2
seq_len: 6
seq_lengths: [6, 3]
initial_state: random
seed: 21
matrix:
  cell: [lstm, gru]
""",
    "tight.yaml": """
name: tight
cell: gru
input_size: 3
hidden_size: 4
batch: 2
seq_len: 5
seed: 22
tolerance: {adapters: {torch-cpu: {atol: 1.0e-9, rtol: 0}}}
""",
    "rev.yaml": """
name: rev
cell: lstm
input_size: 3
hidden_size: 4
direction: reverse
batch: 2
seq_len: 4
seed: 23
""",
}
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Tables (with their cells' classes), images and section ids of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.images: list[str] = []
        self.ids: list[str] = []
        self.cells: list[tuple[str, str]] = []  # (class, text)
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.images.append(a["src"])
        elif tag == "td":
            self._cell = [a.get("class") or "", ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell[0], self._cell[1].strip()))
            self._cell = None


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    (root / "cases").mkdir()
    for name, text in CASES.items():
        (root / "cases" / name).write_text(text)
    result = runner.run(discover([root / "cases"]), registry.select(ADAPTERS))
    out = write_report(result, root / "report")
    page = Page()
    page.feed((out / "index.html").read_text())
    return result, out, page


def test_statuses_of_the_tiny_run(report):
    result, _, _ = report
    status = {(p.case, p.adapter): p.status for p in result.pairs}
    assert status[("tight", "torch-cpu")] == "DIVERGED"
    assert status[("rev", "torch-cpu")] == "not applicable"
    assert status[("stack-lstm", "torch-cpu")] == status[("stack-gru", "noise-floor")] == "pass"


def test_summary_tables_with_verdict_colours(report):
    result, _, page = report
    # overview + one per case + mapping tables + environment tables
    assert page.tables >= 1 + len(result.cases) + 3
    for case in result.cases:
        assert f"case-{case.name}" in page.ids
    verdict_cells = {(cls, text) for cls, text in page.cells if cls in
                     ("pass", "diverged", "na", "baseline")}
    assert ("diverged", "DIVERGED") in verdict_cells
    assert ("na", "n/a") in verdict_cells  # the grid's
    assert ("pass", "pass") in verdict_cells and ("baseline", "baseline") in verdict_cells
    # a not-applicable pair is no table row: a line under the table gives its reason
    html = (report[1] / "index.html").read_text()
    rev = html.split('id="case-rev"')[1].split("</section>")[0]
    assert re.search(r'<p class="na">not applicable:</p><ul><li><code>torch-cpu</code>: '
                     r"PyTorch[^<]*reverse", rev)
    assert "<td>torch-cpu</td>" not in rev


def test_by_default_only_the_pair_that_did_not_pass_has_plots(report):
    result, out, page = report
    failing = [p for p in result.pairs if p.status not in ("pass", "baseline")
               and p.has_rows]
    assert [(p.case, p.adapter) for p in failing] == [("tight", "torch-cpu")]
    assert [re.sub(r"^\d+-", "", Path(s).name) for s in page.images] == ["tight--torch-cpu.png"]
    assert sorted(f"plots/{p.name}" for p in (out / "plots").iterdir()) == page.images
    assert ("<p id=\"plots\">Plots: the 1 pair that did not pass (run with <code>--plots all"
            "</code> for every pair).</p>") in (out / "index.html").read_text()


def test_plots_all_draws_a_plot_per_pair_with_rows_and_heatmaps_for_stacks(report, tmp_path):
    result, _, _ = report
    out = write_report(result, tmp_path / "all", plots="all")
    page = Page()
    page.feed((out / "index.html").read_text())
    with_rows = [p for p in result.pairs if p.rows is not None and (p.rows["max_abs"] > 0).any()]
    plots = [src for src in page.images if not src.endswith("-layers.png")]
    heatmaps = [src for src in page.images if src.endswith("-layers.png")]
    assert len(plots) == len(with_rows)
    for src in page.images:
        assert src.startswith("plots/") and (out / src).read_bytes()[:8] == PNG
    # noise-floor returns every layer's y on the 2-layer stacks; torch returns only the last
    assert sorted(re.sub(r"^\d+-", "", Path(s).name) for s in heatmaps) == [
        "stack-gru--noise-floor-layers.png", "stack-lstm--noise-floor-layers.png"]
    assert not any("rev--torch-cpu" in s for s in page.images)  # not applicable: no rows, no plot
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
        Path(s).name for s in page.images)
    n = sum(p.has_rows for p in result.pairs)
    assert f"Plots: every pair with divergence rows ({n})." in (out / "index.html").read_text()


def test_plots_none_draws_nothing(report, tmp_path):
    result, out, _ = report
    folder = shutil.copytree(out, tmp_path / "none")
    write_report(result, folder, plots="none")
    page = Page()
    page.feed((folder / "index.html").read_text())
    assert page.images == [] and not list((folder / "plots").glob("*.png"))
    assert "Plots: none were drawn (<code>--plots none</code>)." in (
        folder / "index.html").read_text()
    with pytest.raises(ValueError, match="plots"):
        write_report(result, tmp_path / "bad", plots="some")


def test_run_and_merge_take_the_plots_option(tmp_path):
    """``run --plots all`` draws the passing pairs' plots too; ``merge`` takes the option."""
    from harness.cli import build_parser, main

    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "stack.yaml").write_text(CASES["stack.yaml"])
    for which, drawn in (("failed", False), ("all", True)):
        out = tmp_path / which
        assert main(["run", str(cases), "--adapters", "reference,torch-cpu", "--quiet",
                     "--out", str(out), "--plots", which]) == 0
        assert bool(list((out / "plots").glob("*--torch-cpu.png"))) is drawn, which
    args = build_parser().parse_args(["merge", "o", "s1", "--plots", "all"])
    assert args.plots == "all"
    assert build_parser().parse_args(["merge", "o", "s1"]).plots == "failed"
    from harness.report.html_plots import PLOTS

    for command in (["run"], ["merge", "o", "s1"]):
        with pytest.raises(SystemExit):  # argparse refuses what the report does not know
            build_parser().parse_args([*command, "--plots", "some"])
    for which in PLOTS:
        assert build_parser().parse_args(["run", "--plots", which]).plots == which


def test_mapping_tables_and_environment(report):
    _, out, page = report
    html = (out / "index.html").read_text()
    texts = {text for _, text in page.cells}
    assert "weight_ih_l0" in texts and "weight_hh_l1_reverse" in texts  # torch's own names
    assert "<summary><code>torch</code> — stack-lstm</summary>" in html
    assert 'id="environment"' in html
    import torch

    assert torch.__version__ in texts
    # the cuDNN RNN TF32 setting, by the name this torch has (harness/adapters/_torch.py)
    assert {"torch.backends.cudnn.rnn.fp32_precision", "torch.backends.cudnn.allow_tf32"} & texts


def test_reused_folder_keeps_only_this_runs_plots(report, tmp_path):
    result, out, _ = report
    folder = shutil.copytree(out, tmp_path / "again")
    (folder / "plots" / "999-stale.png").write_bytes(PNG)
    write_report(result, folder)
    assert not (folder / "plots" / "999-stale.png").exists()


def test_plots_need_rows_with_nonzero_errors(tmp_path):
    empty = pd.DataFrame(columns=["output", "layer", "direction", "t", "max_abs", "noise_floor",
                                  "atol", "rtol", "verdict"])
    assert not error_plot(empty, tmp_path / "a.png", "x")
    exact = pd.DataFrame({"output": ["y", "y"], "layer": [0, 0], "direction": [0, 0],
                          "t": pd.array([0, 1], dtype="Int64"), "max_abs": [0.0, 0.0],
                          "noise_floor": [0.0, 0.0], "atol": 1e-5, "rtol": 1e-5,
                          "verdict": "pass"})
    assert not error_plot(exact, tmp_path / "b.png", "x")
    assert not layer_heatmap(exact, tmp_path / "c.png", "x")
    assert not list(tmp_path.iterdir())


def test_importing_the_report_imports_no_matplotlib():
    """matplotlib is imported by the first plot drawn, not with harness or its report."""
    code = ("import sys, harness, harness.report.html, harness.report.plots; "
            "assert 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_markdown_tables_html():
    html = markdown_tables_html("### `torch`: PyTorch\n\nH=4\n\n| tensor | shape |\n|---|---|\n"
                                "| `weight_ih_l0` | [16, 3] |\n\nAt run time: a <note>\n")
    assert "<h4><code>torch</code>: PyTorch</h4>" in html
    assert "<tr><th>tensor</th><th>shape</th></tr>" in html
    assert "<td><code>weight_ih_l0</code></td><td>[16, 3]</td>" in html
    assert "<p>At run time: a &lt;note&gt;</p>" in html


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


CHECK = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  const d = document.createElement("div");
  d.id = "render-check";
  d.textContent = "images " + ok + "/" + imgs.length
    + " tables " + document.querySelectorAll("table").length
    + " width " + document.body.scrollWidth;
  document.body.appendChild(d);
});
</script>"""


def _browser(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    chromium = _chromium()
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars", *args,
           page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed "
                    "(apt-get install chromium; .ci/run does it where apt-get is available)")
def test_page_renders_in_a_real_browser(report, tmp_path):
    result, out, page = report
    # The check script goes into a copy beside index.html (same folder: same relative plots/);
    # the report itself carries no script.
    check = out / "render-check.html"
    check.write_text((out / "index.html").read_text().replace("</body>", CHECK + "</body>"))
    try:
        run = _browser(check, tmp_path / "profile-dom", "--virtual-time-budget=10000", "--dump-dom")
    finally:
        check.unlink()
    m = re.search(r'id="render-check">images (\d+)/(\d+) tables (\d+) width (\d+)<', run.stdout)
    assert m, f"no render marker in the DOM Chromium dumped; stderr: {run.stderr[-2000:]}"
    ok, total, tables = int(m[1]), int(m[2]), int(m[3])
    assert total == len(page.images) > 0 and ok == total, f"{total - ok} image(s) did not load"
    assert tables == page.tables
    for case in result.cases:
        assert f'id="case-{case.name}"' in run.stdout

    shot = tmp_path / "page.png"
    run = _browser(out / "index.html", tmp_path / "profile-shot", "--window-size=1280,1600",
                   f"--screenshot={shot}")
    assert shot.is_file(), run.stderr[-2000:]
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1600)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) blank"
    # verdict colours are on screen: pass green and DIVERGED red table cells
    present = {rgb for _, rgb in colours}
    assert (0xD8, 0xF0, 0xDC) in present and (0xF6, 0xC9, 0xCC) in present


def test_junit_xml_carries_case_adapter_verdict(tmp_path):
    """Conformance items written to JUnit XML: names case::adapter, and properties."""
    xml = tmp_path / "junit.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "cases/reverse.yaml", "-q",
                          "-p", "no:cacheprovider", "--adapters", "noise-floor,torch-cpu",
                          f"--junitxml={xml}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    assert cases
    seen = set()
    for tc in cases:
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        assert tc.get("name") == props["adapter"] and props["case"] in tc.get("classname")
        assert {"case", "adapter", "framework", "device", "dtype", "verdict"} <= set(props)
        skipped = tc.find("skipped") is not None
        if props["verdict"] == "pass":
            assert not skipped and float(props["max_abs"]) >= 0 and float(props["tol_ratio"]) <= 1
        else:
            assert skipped and props["reason"]
        seen.add(props["verdict"])
    assert seen == {"pass", "not applicable"}  # torch-cpu has no reverse-only direction


def test_every_tox_pytest_command_writes_junit_xml():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    commands = [line.strip() for section in tox.sections() if section.startswith("testenv")
                for line in tox[section].get("commands", "").splitlines() if "pytest" in line]
    assert commands
    for command in commands:
        assert "--junitxml=" in command, f"{command!r} writes no JUnit XML"
    assert len({re.search(r"--junitxml=(\S+)", c)[1] for c in commands}) == len(commands)


def test_diverged_pair_says_where_it_diverged_first(report):
    result, out, _ = report
    p = next(p for p in result.pairs if (p.case, p.adapter) == ("tight", "torch-cpu"))
    first = compare.first_divergence(p.rows)
    # the run left the reason empty (no exception): the report writes where and how much
    where = (f"{first['output']} diverges first at layer {int(first['layer'])}, forward "
             f"direction (d0), step t={int(first['t'])}")
    assert int(first["direction"]) == 0
    for name in ("summary.md", "index.html"):
        assert where in (out / name).read_text(), name


def test_float64_cells_give_ulp_not_a_floor_ratio(tmp_path):
    (tmp_path / "f64.yaml").write_text("name: f64\ncell: lstm\ninput_size: 3\nhidden_size: 4\n"
                                       "dtype: float64\n")
    result = runner.run(discover([tmp_path / "f64.yaml"]),
                        registry.select(["reference", "noise-floor"]))
    out = write_report(result, tmp_path / "report", plots="none")
    html = (out / "index.html").read_text()
    ulp = result.pairs[1].rows["max_ulp"].max()  # noise-floor: float64 rounding is the identity
    assert f"pass, {ulp:.3g} ulp" in html and " 0×" not in html
    assert f"{ulp:.3g} ulp" in (out / "summary.md").read_text()


CHECK_GRID = """<script>
window.addEventListener("load", () => {
  const heads = Array.from(document.querySelectorAll("table.matrix tr:first-child th"));
  const cut = heads.filter(h => h.getBoundingClientRect().right > window.innerWidth);
  const d = document.createElement("div");
  d.id = "grid-check";
  d.textContent = "columns " + heads.length + " cut " + cut.map(h => h.textContent).join(",")
    + " window " + window.innerWidth;
  document.body.appendChild(d);
});
</script>"""


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed "
                    "(apt-get install chromium; .ci/run does it where apt-get is available)")
def test_every_adapter_column_of_the_grid_is_visible_at_1400_px(tmp_path):
    """Every registered adapter as a column (GPU ones unavailable here), long case names: the
    grid must show every column in a 1400 px wide window."""
    from harness.spec import Case

    cases = [Case(name=f"seed00{k}-acoustic-blstm-bidirectional-{k}", cell="lstm", input_size=3,
                  hidden_size=4) for k in range(3)]
    # the default selection: a named-only adapter is a column only where a run names it
    adapters = [a for a in registry.ADAPTERS.values() if not a.named_only]
    statuses = [compare.PASS, compare.UNAVAILABLE, compare.NOT_APPLICABLE]
    pairs = [PairResult(c.name, a.name, statuses[(i + j) % 3], reason="(layout test)")
             for i, c in enumerate(cases) for j, a in enumerate(adapters)]
    result = RunResult(cases=cases, adapters=adapters, pairs=pairs)
    out = write_report(result, tmp_path / "report", plots="none")
    check = out / "grid-check.html"
    check.write_text((out / "index.html").read_text().replace("</body>", CHECK_GRID + "</body>"))
    run = _browser(check, tmp_path / "profile-grid", "--window-size=1400,900",
                   "--virtual-time-budget=5000", "--dump-dom")
    m = re.search(r'id="grid-check">columns (\d+) cut (.*?) window (\d+)<', run.stdout)
    assert m, f"no marker in the DOM Chromium dumped; stderr: {run.stderr[-2000:]}"
    assert int(m[1]) == 1 + len(adapters) and int(m[3]) == 1400
    assert m[2] == "", f"columns cut off at 1400 px: {m[2]}"
