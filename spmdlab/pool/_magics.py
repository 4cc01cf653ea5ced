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
        """``%%spmd [n]``: run this cell on the pool's workers (MATLAB ``spmd(n) ...
        end``); assigned variables come back as Composites."""
        from . import _client

        words = line.split()
        n = None
        if len(words) > 1 or words and not words[0].isdigit():
            raise ValueError(f"%%spmd: give at most one number of workers (got {line!r})")
        if words:
            n = int(words[0])
        pool = _client.current_pool()
        cell_number = self.shell.execution_count
        # a blank first line: the cell's line numbers as the notebook shows them
        pool.run_cell("\n" + cell, self.shell.user_ns, n=n,
                      filename=f"<spmd cell [{cell_number}]>")


def load(ipython):
    ipython.register_magics(SpmdMagics)
