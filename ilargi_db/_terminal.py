"""Long work shows progress in a terminal or a Jupyter notebook and stays quiet otherwise; every step is a point
to stop at."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import time

# In a notebook a bar is an output of the cell that stays on the page: steps shorter than this show none (tqdm's
# own TQDM_DELAY, where set, decides instead).
NOTEBOOK_DELAY_S = 1.0


def in_terminal() -> bool:
    return sys.stderr.isatty()


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython with a kernel: JupyterLab, VS Code, Colab, nbclient)."""
    ipython = sys.modules.get("IPython")  # never imported here: a kernel has imported it already
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel")


@functools.cache
def _bar_class(widget: bool) -> type:
    # Not tqdm.auto: without ipywidgets it warns and falls back to the text bar, which is what this chooses.
    if widget:
        from tqdm.notebook import tqdm
    else:
        from tqdm import tqdm

    from ilargi_db.interruption import check_interrupted

    class Progress(tqdm):
        """tqdm whose ``update()`` stops the job when it was interrupted (shown or not)."""

        def update(self, n: float = 1) -> bool | None:
            check_interrupted()
            return super().update(n)

        def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
            # tqdm redraws a renamed bar before its delay is over, and its close() then takes it for one never
            # shown and leaves it on the page: wait for the delay here too.
            super().set_description(desc, refresh and time.time() >= self.start_t + self.delay)

    return Progress


class QuietProgress:
    """The bar's interface where none is shown: each ``update()`` is still a point to stop at, and tqdm (some
    15 ms to import) is not imported for a bar nobody sees."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0

    def update(self, n: float = 1) -> None:
        from ilargi_db.interruption import check_interrupted

        check_interrupted()
        self.n += n

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        pass

    def __enter__(self) -> QuietProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def progress(total: int, desc: str, show: bool | None = None, leave: bool = False):
    """A tqdm progress bar; ``show=None`` shows it only in a terminal (on stderr) or a Jupyter notebook, and
    otherwise gives a :class:`QuietProgress`.

    In a notebook the bar is tqdm's widget where ipywidgets is installed, else tqdm's text bar on the cell's
    stderr (Jupyter redraws it in place), and it appears only for work that lasts :data:`NOTEBOOK_DELAY_S`.
    ``update()`` raises :class:`~ilargi_db.interruption.TrainingInterrupted` once the job was asked to stop: the
    training loops need no check of their own.
    """
    notebook = in_notebook()
    if not ((notebook or in_terminal()) if show is None else show):
        return QuietProgress(total, desc)
    if not notebook:
        return _bar_class(False)(total=total, desc=desc, leave=leave)
    delay = {} if "TQDM_DELAY" in os.environ else {"delay": NOTEBOOK_DELAY_S}
    widget = importlib.util.find_spec("ipywidgets") is not None
    return _bar_class(widget)(total=total, desc=desc, leave=leave, **delay)
