"""``%load_ext spmdlab``: the ``%%spmd`` cell magic in IPython and Jupyter.

``%%spmd`` runs the cell on every worker of the current pool (started, at this
machine's size, if there is none: MATLAB's ``spmd`` does the same); ``%%spmd 2`` on
the first two (MATLAB ``spmd(2)``). The client's variables the cell reads go to the
workers; the variables it assigns come back as Composites.
"""

from IPython.core.magic import Magics, cell_magic, magics_class


@magics_class
class SpmdMagics(Magics):
    @cell_magic
    def spmd(self, line, cell):
        """``%%spmd [n]`` or ``%%spmd m n``: run this cell on the pool's workers (MATLAB
        ``spmd(n) ... end``, ``spmd(m, n) ... end``); assigned variables come back as
        Composites."""
        from ..errors import SpmdValueError
        from . import _client

        words = line.replace(",", " ").split()
        n = None
        if len(words) > 2 or not all(w.isascii() and w.isdigit() for w in words):
            raise SpmdValueError(f"%%spmd: give nothing, n or m n, as MATLAB's spmd(n) and "
                                 f"spmd(m, n) (got {line!r})")
        if len(words) == 2 and not 1 <= int(words[0]) <= int(words[1]):
            # (before a pool is started for it)
            raise SpmdValueError(f"%%spmd {words[0]} {words[1]}: needs 1 <= m <= n (got "
                                 f"m = {int(words[0])}, n = {int(words[1])})")
        pool = _client.current_pool()
        if len(words) == 1:
            n = int(words[0])
        elif len(words) == 2:  # at least m, at most n workers
            least, most = int(words[0]), int(words[1])
            if least > pool.size:
                raise SpmdValueError(f"%%spmd {least} {most}: needs at least m = {least} "
                                     f"workers in the pool, which has {pool.size}")
            n = min(most, pool.size)
        # the number IPython shows as In[k]: the shell's count is the next cell's while
        # this one runs (the traceback named cell [15] for In[14])
        running = getattr(self.shell.displayhook, "exec_result", None)
        cell_number = getattr(running, "execution_count", None) or \
            self.shell.execution_count
        # a blank first line: the cell's line numbers as the notebook shows them
        pool.run_cell("\n" + cell, self.shell.user_ns, n=n,
                      filename=f"<spmd cell [{cell_number}]>")


def load(ipython):
    ipython.register_magics(SpmdMagics)
