"""The example notebooks, executed as Jupyter runs them and kept with their outputs.

``python -m tests.notebooks [NAME.ipynb ...]`` (from the repository root, with the ``dev``
extra) executes the notebooks under ``examples/`` in a scratch directory and writes each back with its outputs,
as a reader browsing the repository sees them. ``tests/test_examples.py`` executes them again and checks the
outputs committed against the fresh ones by what each cell shows (text, a table, a plot), never by values
that change from run to run (timings, the strategy the machine favours, memory addresses).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"  # tqdm's widget bar, where ipywidgets is installed
# Notebook metadata that changes with the machine that ran it and says nothing to a reader.
MACHINE_METADATA = ("language_info", "widgets")


def execute(name: str, directory: Path, timeout: int = 600):
    """The notebook ``name`` of ``examples/`` run in ``directory`` (its working directory), outputs as
    :func:`tidy` leaves them."""
    import nbformat

    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return tidy(run(notebook, directory, timeout))


def run(notebook, directory: Path, timeout: int = 600):
    """``notebook`` (nbformat's) executed in a Jupyter kernel in ``directory``, its outputs as the kernel sent
    them; a cell that raises stops it with nbclient's ``CellExecutionError`` (the cell and its traceback)."""
    import nbclient

    client = nbclient.NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,  # no timestamps in the cells' metadata
        resources={"metadata": {"path": str(directory)}},
    )
    client.execute()
    return notebook


def rendered(text: str) -> str:
    """Stream text as Jupyter shows it: a carriage return goes back to the start of its line, and what follows
    overwrites it (a text progress bar redrawing itself ends as its last state)."""
    lines = []
    for line in text.split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part) :]
        lines.append(shown.rstrip())
    return "\n".join(lines)


def merged(outputs: list) -> list:
    """``outputs`` with each run of stream outputs of one name joined into one (a kernel sends text in chunks)."""
    joined: list = []
    for output in outputs:
        if output.output_type == "stream" and joined and joined[-1].get("name") == output.name:
            joined[-1].text += output.text
        else:
            joined.append(output)
    return joined


def tidy(notebook):
    """``notebook`` with its outputs as a reader sees them: each cell's stream text joined and rendered, blank
    streams (a progress bar that cleared itself) and widget bars left out, and no machine metadata."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = merged([o for o in cell.outputs if WIDGET not in o.get("data", {})])
        for output in outputs:
            if output.output_type == "stream":
                output.text = rendered(output.text).strip("\n") + "\n"
        cell.outputs = merged([o for o in outputs if o.output_type != "stream" or o.text.strip()])
    for key in MACHINE_METADATA:
        notebook.metadata.pop(key, None)
    return notebook


def shown(notebook) -> dict[str, list[str]]:
    """What each code cell shows, by the cell's id: its outputs' kinds (printed text, the MIME types of a result
    or display), without their values or their order. Not stderr: warnings there come and go with the versions
    of the libraries installed (and progress bars clear themselves)."""
    kinds = {}
    for cell in notebook.cells:
        if cell.cell_type == "code":
            kinds[cell.id] = sorted(
                {
                    "stream:stdout" if o.output_type == "stream" else f"{o.output_type}:{','.join(sorted(o.data))}"
                    for o in cell.outputs
                    if not (o.output_type == "stream" and o.name == "stderr")
                }
            )
    return kinds


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(prog="python -m tests.notebooks", description=__doc__.splitlines()[2])
    parser.add_argument("names", nargs="*", default=NOTEBOOKS, help=f"notebooks of examples/ (all: {NOTEBOOKS})")
    args = parser.parse_args(argv)
    for name in args.names:
        with tempfile.TemporaryDirectory(prefix="ilargi_notebook_") as scratch:
            os.environ["TMPDIR"] = scratch  # the kernel's temporary files too: none is left behind
            notebook = execute(name, Path(scratch))
        nbformat.write(notebook, EXAMPLES / name)
        print(f"{name}: {sum(len(c.get('outputs', [])) for c in notebook.cells)} outputs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
