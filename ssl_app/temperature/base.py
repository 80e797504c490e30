"""What every temperature policy shares: where training stands (:class:`Progress`) and the policy interface.

A loss with a temperature holds one :class:`TemperaturePolicy` (a number in a config means
:class:`~ssl_app.temperature.Constant`) and asks it for "τ now" once per call,
``policy(progress, handover)``. The method hands the loss the :class:`Progress` once per training
step (``ContrastiveLoss.set_progress``); a policy never reaches into the Trainer, so it is a pure
function of the progress, the batch and its own state (a learnable τ's parameter), and a resumed
run, which restores the progress and the state, continues with the τ it would have had.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, Optional, Union

from torch import Tensor, nn

from ssl_app.checks import Finite, PositiveFinite, check
from ssl_app.errors import ConfigError
from ssl_app.temperature.spelling import LabelForm, spell, spell_generic

if TYPE_CHECKING:
    from ssl_app.handover import MaskedSimilarities

#: What a schedule counts: epochs (fractional: epoch + batch / batches per epoch) or optimiser steps.
Unit = Literal["epoch", "step"]


@dataclass(frozen=True)
class Progress:
    """Where training stands at a training step, as the method tells the loss.

    ``epoch``: epochs done, fractional (``current_epoch + batch_idx / batches_per_epoch``);
    ``step``: optimiser steps done (``trainer.global_step``); ``fraction``: ``step`` over the run's
    optimiser steps, ``None`` when the run has no length. ``Progress()`` is the start of a run.
    """

    epoch: float = 0.0
    step: int = 0
    fraction: Optional[float] = 0.0

    def at(self, unit: Unit) -> float:
        """The progress counted in ``unit`` (epochs or optimiser steps)."""
        return float(self.epoch) if unit == "epoch" else float(self.step)


class PolicyUsedAsNumber(TypeError):
    """A temperature policy was used as a number: a loss written when ``self.temperature`` was one."""


def _not_a_number(policy: TemperaturePolicy, *_: object) -> NoReturn:
    raise PolicyUsedAsNumber(
        f"self.temperature is a temperature policy ({policy.label()}), not a number, since temperatures became "
        "policies (ssl_app.temperature): terms(handover, tau, with_stats) receives the τ in force as tau; divide by "
        'that (docs/extending.md, "A loss")'
    )


class TemperaturePolicy(nn.Module):
    """The τ of a loss as a function of training progress (and, for some, of the batch).

    A subclass implements :meth:`value` (a Python float when τ depends on the progress alone, so the
    loss divides by a number; a 0-d tensor when it has a gradient or comes from the batch) and
    :meth:`label`, and validates its options in ``__init__`` with one ``ConfigError`` naming each.
    A policy is not a number: arithmetic with one raises :class:`PolicyUsedAsNumber`, saying so.
    """

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _not_a_number
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __float__ = _not_a_number

    #: How the policy is spelled in labels (``ssl_app.temperature.spelling``); ``None``: ``Name(key=value, ...)``.
    label_form: ClassVar[Optional[LabelForm]] = None
    #: Constructor arguments the generic tests build the policy with (``{}``: its defaults).
    examples: ClassVar[tuple[dict[str, Any], ...]] = ({},)

    def value(self, progress: Progress, handover: Optional[MaskedSimilarities] = None) -> Union[float, Tensor]:
        raise NotImplementedError

    def forward(self, progress: Progress, handover: Optional[MaskedSimilarities] = None) -> Union[float, Tensor]:
        return self.value(progress, handover)

    def options(self) -> dict[str, Any]:
        """The policy's constructor arguments, as it was built (``init`` of a learnable τ, not its current value):
        what its label and its config say. By default the attribute of each constructor argument's name (None where
        the policy keeps it under another: override this then)."""
        return {name: getattr(self, name, None) for name in type(self).defaults(required=True)}

    @classmethod
    def defaults(cls, required: bool = False) -> dict[str, Any]:
        """The constructor's arguments with their defaults (``required``: those without one too, as ``None``)."""
        found = {}
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if parameter.default is not parameter.empty or required:
                found[name] = None if parameter.default is parameter.empty else parameter.default
        return found

    def label(self) -> str:
        """The canonical label (``ssl_app.temperature.spelling``): ``0.5``, ``cosine:0.1-1:T=200``, ``learnable:0.07``;
        it parses back to the same policy (``ssl_app.temperature.labels.PolicySpec``)."""
        form = type(self).label_form
        if form is None:
            return spell_generic(type(self).__name__, self.options())
        return spell(form, self.options(), type(self).defaults())

    def extra_repr(self) -> str:
        return self.label()

    def __str__(self) -> str:  # what a loss's repr and hparams show
        return self.label()


def check_positive(value: float, option: str) -> float:
    """Return ``value`` as a float; raise ``ConfigError`` naming ``option`` unless it is finite and > 0."""
    return check(PositiveFinite, value, option)


def check_real(value: float, option: str) -> float:
    """Return ``value`` as a float; raise ``ConfigError`` naming ``option`` unless it is a finite number."""
    return check(Finite, value, option)


def check_unit(unit: str, option: str) -> Unit:
    if unit not in ("epoch", "step"):
        raise ConfigError(f"{option} must be epoch or step, got {unit!r}")
    return unit  # type: ignore[return-value]
