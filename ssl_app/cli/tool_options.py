"""The options of ``python -m ssl_app export`` and ``embed``, parsed before torch and Lightning are imported.

``ssl_app.cli.entry`` parses an ``export`` or ``embed`` command line here first: ``--help`` and a bad option
(one ``error:`` line, status 2) are answered without the commands' own modules, which import torch and
Lightning to read a checkpoint; those parse the same parsers again and do the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Optional

from ssl_app.projector import DEFAULT_SAMPLES, DEFAULT_THUMBNAIL

#: ``export --format``: a state dict with meta data, or a ``torch.export`` program.
FORMATS = ("state_dict", "torch_export")
#: ``embed --split``: the run's splits.
SPLITS = ("train", "val", "test")


def export_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m ssl_app export",
        description="Write the trained backbone of a checkpoint (no heads, no optimiser) to a file that "
        "torch.load(..., weights_only=True) reads; README, 'Use the trained encoder', shows how to load it.",
    )
    parser.add_argument("--ckpt", required=True, help="a checkpoint written by python -m ssl_app fit (RUN/checkpoints/last.ckpt)")
    parser.add_argument("--out", required=True, help="the file to write (e.g. encoder.pt)")
    parser.add_argument("--format", choices=FORMATS, default="state_dict",
                        help="state_dict (default): weights and meta data; torch_export: a program torch.export.load runs "
                        "(no ssl_app or torchvision needed; images of the run's crop size)")  # fmt: skip
    parser.add_argument("--with-head", action="store_true", help="also export the projection head")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_import_option(parser)
    return parser


def add_import_option(parser: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable): the user's own modules that the checkpoint's classes live in."""
    parser.add_argument(
        "--import", dest="imports", action="append", metavar="MODULE",
        help="import MODULE first (repeatable): the module of your own loss, method or datamodule that the checkpoint "
        "names; a class path read from a checkpoint is never imported on its own",
    )  # fmt: skip


def embed_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m ssl_app embed",
        description="Backbone features (and projections) of every image of a data set, through the run's clean "
        "transform, saved as .npz (features, labels, indices, paths, classes, projections).",
    )
    parser.add_argument("--ckpt", required=True, help="a checkpoint written by python -m ssl_app fit")
    parser.add_argument("--data", help="an image folder (PATH/<class>/* or PATH/*); default: the run's own data")
    parser.add_argument("--split", choices=SPLITS, default="test", help="without --data: the run's split to embed (default test)")
    parser.add_argument("--out", required=True, help="the .npz file to write")
    parser.add_argument("--projections", action="store_true", help="also save the projection head's L2-normalised outputs")
    parser.add_argument("--batch-size", type=int, default=256, help="images per batch (default 256)")
    parser.add_argument("--num-workers", type=int, default=None, help="DataLoader workers (default: the run's; 0 for --data)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument(
        "--projector",
        metavar="DIR",
        help="also write a seeded subset to TensorBoard's projector in DIR (tensorboard --logdir DIR): the projections "
        "with --projections, else the features; labels, indices and thumbnails",
    )
    parser.add_argument("--projector-samples", type=int, default=DEFAULT_SAMPLES, help="images in the projector (default 1000)")
    parser.add_argument("--projector-seed", type=int, default=0, help="the projector subset's seed (default 0)")
    parser.add_argument(
        "--thumbnail-size", type=int, default=DEFAULT_THUMBNAIL, help="sprite thumbnails' side in px (default 32)"
    )
    add_import_option(parser)
    return parser


#: The commands whose options are parsed here first.
PARSERS = {"export": export_parser, "embed": embed_parser}


def early_answer(command: str, args: Sequence[str], err: Any = None) -> Optional[int]:
    """The exit status when ``command``'s ``args`` ask for help (0) or are refused (2, one ``error:`` line), else None:
    the command's own module parses them again and runs."""
    if command not in PARSERS:
        return None
    parsed = parse_or_exit(PARSERS[command](), args, err)
    return parsed if isinstance(parsed, int) else None


class _BadArguments(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are raised (:func:`parse_or_exit` prints them as one line), and
    which takes no abbreviations (``--with`` is no ``--with-head``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        raise _BadArguments(message)


def parse_or_exit(parser: argparse.ArgumentParser, args: Sequence[str], err: Any) -> argparse.Namespace | int:
    """``args`` parsed, or the exit status after ``--help`` (0) or after one ``error:`` line (2)."""
    try:
        return parser.parse_args(list(args))
    except _BadArguments as error:
        print(
            f"error: {parser.prog.split()[-1]}: {error} (options: {parser.prog} --help)", file=sys.stderr if err is None else err
        )
        return 2
    except SystemExit as stop:  # --help
        return int(stop.code or 0)
