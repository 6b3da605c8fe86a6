"""Commands that run another program: kubesage's options before ``--``, the program's after.

Click's ``ignore_unknown_options`` passes an option it does not know on to the extra
arguments wherever it stands, so ``kubesage gpu launch --gpus 12 --devices dra -- python
train.py`` once ended its torchrun line in ``--devices dra`` when ``--devices`` was
unknown. :class:`PassThroughCommand` splits the arguments at the first ``--`` before click
sees them: everything before it is parsed strictly (an unknown option is click's
"No such option" error naming it, a stray argument an error too) and everything after it
is the program's, untouched, in ``ctx.args``.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand

SEPARATOR = "--"


class PassThroughCommand(TyperCommand):
    """A typer command whose pass-through arguments are exactly those after ``--``
    (use as ``@app.command(cls=PassThroughCommand)``; read them from ``ctx.args``)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), SEPARATOR, "COMMAND..."]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if SEPARATOR in args:
            split = args.index(SEPARATOR)
            ours, theirs = args[:split], args[split + 1 :]
        else:
            ours, theirs = list(args), []
        # Strays are collected, not rejected outright, so the error can say where they go.
        ctx.allow_extra_args = True
        stray = super().parse_args(ctx, ours)
        if stray and not ctx.resilient_parsing:
            ctx.fail(
                f"unexpected argument(s) before '{SEPARATOR}': {' '.join(stray)} "
                f"(the command to run goes after '{SEPARATOR}')"
            )
        ctx.args = theirs
        return theirs
