"""netio-model: performance models of ML training on a system, from first principles.

Three strictly validated inputs (:mod:`netio.model.schema`: System, Model, Execution,
from JSON/TOML files or presets), collective cost models (:mod:`netio.model.collectives`),
memory per accelerator (:mod:`netio.model.memory`) and the training step
(:mod:`netio.model.training`), all vectorised over layouts (:mod:`netio.model.layout`).
The network is read from the system file or from a netio fabric profile
(:mod:`netio.fabric_profile`); nothing here imports the daemon or the analyzer.
"""

from netio.model.collectives import Algorithm, Collective, CollectiveResult, collective
from netio.model.layout import Layouts
from netio.model.schema import (
    Execution,
    Model,
    System,
    load_execution,
    load_model,
    load_system,
    preset_names,
)
from netio.model.training import Infeasible, StepArrays, TrainResult, evaluate, train

__all__ = [
    "Algorithm",
    "Collective",
    "CollectiveResult",
    "Execution",
    "Infeasible",
    "Layouts",
    "Model",
    "StepArrays",
    "System",
    "TrainResult",
    "collective",
    "evaluate",
    "load_execution",
    "load_model",
    "load_system",
    "preset_names",
    "train",
]
