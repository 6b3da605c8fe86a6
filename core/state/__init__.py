"""The cluster model: resource state, the fit rule over it, and the fragmentation measure."""

from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.state.fit import NO_REASON, FitCheck, FitReport, fit_mask, fit_report

__all__ = ["NO_REASON", "ClusterState", "FitCheck", "FitReport", "fit_mask", "fit_report"]
