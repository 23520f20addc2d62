"""netio.scenario: realistic RoCEv2 + PFC captures with their exact expected analysis.

A one-way pipeline, one module per stage (none imports a later one):
``spec`` (the scenario: ports, flows, pauses, parsed and validated) →
``packets`` (per-port packet tables and the generator's intent) →
``captures`` (pcap files) and ``truth`` (the analysis document they must give);
``generate`` runs it, ``presets`` holds the built-in scenarios.
"""

from netio.scenario.generate import Generated, build, generate
from netio.scenario.packets import pause_intervals
from netio.scenario.presets import PRESETS, bench_dict, demo_dict, preset, small_dict
from netio.scenario.spec import Scenario, load_scenario, scenario_from_dict

__all__ = ["PRESETS", "Generated", "Scenario", "bench_dict", "build", "demo_dict", "generate",
           "load_scenario", "pause_intervals", "preset", "scenario_from_dict", "small_dict"]
