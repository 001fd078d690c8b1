"""The rules, in one explicit table. Each module holds one rule; no import-time discovery."""
from __future__ import annotations

from gcdoctor.types import Rule
from gcdoctor.rules.allocator_boundary import AllocatorBoundaryRule
from gcdoctor.rules.device_starving_cpu import DeviceStarvingCpuRule
from gcdoctor.rules.exposed_communication import ExposedCommunicationRule
from gcdoctor.rules.gc_unneeded import GcUnneededRule
from gcdoctor.rules.data_loader_stall import DataLoaderStallRule
from gcdoctor.rules.host_bound_step import HostBoundStepRule
from gcdoctor.rules.host_total import HostStarvedDeviceRule
from gcdoctor.rules.insufficient_memory_saving import InsufficientMemorySavingRule
from gcdoctor.rules.launch_cost_headroom import LaunchCostHeadroomRule
from gcdoctor.rules.launch_overhead_bound import LaunchOverheadBoundRule
from gcdoctor.rules.loss_jitter import LossJitterRule
from gcdoctor.rules.model_states_dominate import ModelStatesDominateRule
from gcdoctor.rules.offload_link_whatif import OffloadLinkWhatIfRule
from gcdoctor.rules.offload_stall import OffloadStallRule
from gcdoctor.rules.optimizer_step_peak import OptimizerStepPeakRule
from gcdoctor.rules.oom_boundary_gain import OomBoundaryGainRule
from gcdoctor.rules.pcie_saturated_idle import PcieSaturatedIdleRule
from gcdoctor.rules.prescription import PrescriptionRule
from gcdoctor.rules.rank_straggler import RankStragglerRule
from gcdoctor.rules.python_between_ops import PythonBetweenOpsRule
from gcdoctor.rules.queued_idle import DeviceQueuedIdleRule
from gcdoctor.rules.recipe_gap import RecipeGapRule
from gcdoctor.rules.recompute_overhead import RecomputeOverheadRule
from gcdoctor.rules.recompute_regather import RecomputeRegatherRule
from gcdoctor.rules.recompute_share import RecomputeShareRule
from gcdoctor.rules.setup_in_steady_state import SetupInSteadyStateRule
from gcdoctor.rules.sharded_states import ShardedStatesRule
from gcdoctor.rules.sharding_variant import ShardingVariantRule
from gcdoctor.rules.straggler_rank import StragglerRankRule
from gcdoctor.rules.sync_stall import SyncStallRule
from gcdoctor.rules.trace_coverage import TraceCoverageRule

ALL_RULES: list[Rule] = [
    RecomputeOverheadRule(),
    InsufficientMemorySavingRule(),
    OomBoundaryGainRule(),
    ModelStatesDominateRule(),
    GcUnneededRule(),
    PrescriptionRule(),
    RecipeGapRule(),
    OptimizerStepPeakRule(),
    AllocatorBoundaryRule(),
    RecomputeShareRule(),
    LaunchOverheadBoundRule(),
    LaunchCostHeadroomRule(),
    OffloadStallRule(),
    OffloadLinkWhatIfRule(),
    HostBoundStepRule(),
    SyncStallRule(),
    SetupInSteadyStateRule(),
    DataLoaderStallRule(),
    PythonBetweenOpsRule(),
    HostStarvedDeviceRule(),
    DeviceQueuedIdleRule(),
    TraceCoverageRule(),
    StragglerRankRule(),
    PcieSaturatedIdleRule(),
    DeviceStarvingCpuRule(),
    LossJitterRule(),
    RankStragglerRule(),
    ShardedStatesRule(),
    ExposedCommunicationRule(),
    RecomputeRegatherRule(),
    ShardingVariantRule(),
]

BY_CODE: dict[str, Rule] = {r.code: r for r in ALL_RULES}
BY_SLUG: dict[str, Rule] = {r.slug: r for r in ALL_RULES}


def find_rule(name: str) -> Rule | None:
    """A rule by code (case-insensitive) or slug."""
    return BY_CODE.get(name.upper()) or BY_SLUG.get(name.lower())
