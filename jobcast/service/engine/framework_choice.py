"""Which framework a request's job runs in, and why: PyTorch unless something says otherwise.

Rules (:func:`resolve_framework`, the first that applies; the answer's ``assumptions`` quote
the sentence it returns):

1. the request states ``pytorch`` or ``tensorflow`` (``--framework``): that one, as asked;
2. the request's ``stack`` names a framework (:func:`fleet.framework.stack_framework`);
3. the job's history: the runs of the named job (``system``), else of the network, name a
   framework in their stacks: the newest run's;
4. the network's source (:func:`layerwise.network_source.source_framework`): a
   ``module:callable`` or ``.py`` reference is PyTorch; a Keras model, a ``.keras``/``.h5``
   file, a JSON spec that says ``tensorflow`` and a name only the Keras zoo knows are
   TensorFlow;
5. a zoo network asked at an input size its shipped PyTorch spec does not have, where
   torchvision (which would trace it) is not installed: TensorFlow, whose zoo builds it at
   any size (:func:`layerwise.network_source.torch_trace_missing`; the reason says so);
6. otherwise :data:`fleet.framework.DEFAULT_FRAMEWORK` (``pytorch``: what most CNN training
   runs today). A network only PyTorch ships (``resnet18``) is never priced as TensorFlow
   unless the user asks for it.

Rules 4-5 are skipped for an answer that prices no network (a scheduler job's whole run,
``read_network`` False): the zoo is not loaded to name a framework nothing uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fleet.framework import DEFAULT_FRAMEWORK, parse_framework_choice, stack_framework
from jobcast.service.engine.request import JobRequest, JobRequestError

ASK_OTHER = {"pytorch": "--framework tensorflow for Keras",
             "tensorflow": "--framework pytorch for PyTorch"}


def resolve_framework(req: JobRequest, history_stacks: Sequence[str] = (),
                      read_network: bool = True) -> tuple[JobRequest, str]:
    """``req`` with its framework resolved, and the sentence saying which and why (module
    rules); ``history_stacks``: the stacks of the job's (or network's) runs, newest first;
    ``read_network`` False: the network's source is not read (rules 4-5; an answer that
    prices no network, a scheduler job's whole run, does not load the zoo to say so)."""
    try:
        stated = parse_framework_choice(req.framework)
    except ValueError as exc:
        raise JobRequestError(str(exc), field="framework") from None
    if stated is not None:
        return replace(req, framework=stated.value), f"framework {stated.value} (as asked)"
    framework, why = _choose(req, history_stacks, read_network)
    return (replace(req, framework=framework),
            f"framework {framework}: {why} ({ASK_OTHER[framework]})")


def _choose(req: JobRequest, history_stacks: Sequence[str], read_network: bool = True
            ) -> tuple[str, str]:
    """(framework, why) of a request that left it open (rules 2-6)."""
    if req.stack and (found := stack_framework(req.stack, "")):
        return found, f"the stack you named ({req.stack})"
    for stack in history_stacks:
        if stack and (found := stack_framework(stack, "")):
            return found, f"the job's history ran it (stack {stack})"
    if not (req.network and read_network):  # nothing to read (the zoo loads with a network)
        return DEFAULT_FRAMEWORK.value, "the default (most CNN training runs PyTorch)"
    from layerwise.network_source import source_framework, torch_trace_missing

    said = source_framework(req.network)
    if said is not None:
        return said
    if missing := torch_trace_missing(req.network, req.image_size):
        return "tensorflow", f"{req.network} at this input size: {missing}"
    return DEFAULT_FRAMEWORK.value, "the default (most CNN training runs PyTorch)"


__all__ = ["resolve_framework"]
