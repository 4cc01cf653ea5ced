"""What a cell's code reads and assigns, read from its syntax tree (MATLAB's
transparency: the client's variables a block uses go to the workers, the variables it
assigns come back as Composites).
"""

import ast
import io
import tokenize
from typing import List, Set, Tuple

# names an IPython or Jupyter namespace holds that are never the user's variables
_PROMPT_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___", "_oh",
                 "_ih", "_dh", "_ii", "_iii"}


class _Names(ast.NodeVisitor):
    def __init__(self):
        self.assigned: List[str] = []  # in order, each once: names bound at the top level
        self.definitions: Set[str] = set()  # bound by import, def or class
        self.loaded: Set[str] = set()  # read anywhere, nested functions included
        self._depth = 0  # inside a function, lambda, class or comprehension
        self._globals: List[Set[str]] = []  # each nested scope's names declared global

    def _bind(self, name, definition=False):
        # in a function, only a name it declares global binds the top level's (a
        # function the cell calls that bumps a global counter: the client's counter came
        # back unchanged, and the next cell sent it, undoing the workers' bumps)
        if self._depth and name not in self._globals[-1]:
            return
        if name not in self.assigned:
            self.assigned.append(name)
        if definition:
            self.definitions.add(name)
        else:
            self.definitions.discard(name)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.loaded.add(node.id)
        else:
            if isinstance(node.ctx, ast.Del):  # del x: the workers must hold the client's
                self.loaded.add(node.id)  # x (a distributed array's too) to delete it
            self._bind(node.id)

    def visit_Subscript(self, node):
        # a[i] = v, a[i][j] += v, del a[i]: as MATLAB's a(i) = v in spmd, a is assigned
        # (it changed on the workers: read as the client's again, the change was lost).
        # Not through an attribute: os.environ[k] = v leaves the client's os alone
        if not isinstance(node.ctx, ast.Load):
            root = node.value
            while isinstance(root, ast.Subscript):
                root = root.value
            if isinstance(root, ast.Name):
                self._bind(root.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if isinstance(node.target, ast.Name):  # x += 1 reads x first
            self.loaded.add(node.target.id)
        self.generic_visit(node)

    def visit_Global(self, node):
        for name in node.names:
            self.loaded.add(name)
        if self._globals:
            self._globals[-1].update(node.names)

    def _nested(self, node):
        self._depth += 1
        self._globals.append(set())
        self.generic_visit(node)
        self._globals.pop()
        self._depth -= 1

    def visit_FunctionDef(self, node):
        self._bind(node.name, definition=True)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._nested(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._bind(node.name, definition=True)
        self._nested(node)

    def visit_Lambda(self, node):
        self._nested(node)

    def _comprehension(self, node):
        self._nested(node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Import(self, node):
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0], definition=True)

    def visit_ImportFrom(self, node):
        for alias in node.names:
            if alias.name != "*":
                self._bind(alias.asname or alias.name, definition=True)

    def visit_ExceptHandler(self, node):
        if node.name:
            self._bind(node.name)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._bind(node.target.id)  # a walrus binds in the enclosing scope
        self.visit(node.value)

    def visit_MatchAs(self, node):
        if node.name:
            self._bind(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node):
        if node.name:
            self._bind(node.name)

    def visit_MatchMapping(self, node):
        if node.rest:
            self._bind(node.rest)
        self.generic_visit(node)


def names(code: str, filename: str = "<cell>") -> Tuple[List[str], Set[str], Set[str]]:
    """``(assigned, definitions, loaded)`` of a cell's code: the names it binds at the
    top level (in order), those of them bound by import, def or class (which stay on
    the workers), and every name it reads. A syntax error raises SyntaxError, those
    found only as the code is compiled too (``return`` outside a function)."""
    tree = ast.parse(code, filename, "exec")
    compile(tree, filename, "exec", dont_inherit=True)
    visitor = _Names()
    visitor.visit(tree)
    return visitor.assigned, visitor.definitions, visitor.loaded


def is_prompt_name(name: str) -> bool:
    """IPython's own names (``In``, ``_i3``, ``_5``...), never sent to the workers."""
    if name in _PROMPT_NAMES:
        return True
    return name.startswith("_i") and name[2:].isdigit() or \
        name.startswith("_") and name[1:].isdigit()


def compiled(code: str, filename: str = "<cell>") -> Tuple[object, object]:
    """(On a worker) ``(body, shown)``: the cell's code compiled to run, and its last
    statement apart when that is an expression, compiled as Python's prompt compiles a
    line (``"single"``: its value, unless None, goes to ``sys.displayhook``, printed as
    the worker's output, as IPython shows a cell's last value and MATLAB each worker's
    unsuppressed result); ``shown`` is None for a cell that ends otherwise, or with a
    semicolon (``x;``: suppressed, as in IPython and MATLAB)."""
    tree = ast.parse(code, filename, "exec")
    if not tree.body or not isinstance(tree.body[-1], ast.Expr) or _suppressed(code):
        return compile(tree, filename, "exec"), None
    last = ast.Interactive(body=[tree.body.pop()])
    return compile(tree, filename, "exec"), compile(last, filename, "single")


def _suppressed(code: str) -> bool:
    """Whether the code's last token, comments aside, is ``;`` (as IPython reads it)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):  # (it parsed: not expected)
        return False
    for token in reversed(tokens):
        if token.type not in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE,
                              tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            return token.type == tokenize.OP and token.string == ";"
    return False
