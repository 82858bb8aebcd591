"""The training monitor: one line per epoch, resources, a live dashboard, archives.

Guide: docs/monitor.md. ``Monitor`` and its errors are re-exported at
the top level (``fl.Monitor``); the helpers stay here (``fl.monitor.format_eta``, ...).
"""

from flodl.monitor.errors import MonitorError, MonitorServerError
from flodl.monitor.format import format_bytes as format_bytes
from flodl.monitor.format import format_eta as format_eta
from flodl.monitor.format import format_metric as format_metric
from flodl.monitor.monitor import MetricSource as MetricSource
from flodl.monitor.monitor import Monitor
from flodl.monitor.record import EpochRecord as EpochRecord
from flodl.monitor.resources import GpuSnapshot as GpuSnapshot
from flodl.monitor.resources import ResourceSample as ResourceSample
from flodl.monitor.resources import ResourceSampler as ResourceSampler
from flodl.monitor.timeline import Timeline as Timeline
from flodl.monitor.timeline import TimelineEvent as TimelineEvent
from flodl.monitor.timeline import TimelineSample as TimelineSample
from flodl.monitor.timeline import TimelineSummary as TimelineSummary
from flodl.smoke import SmokeBudgetReached

__all__ = ["Monitor", "MonitorError", "MonitorServerError", "SmokeBudgetReached"]
