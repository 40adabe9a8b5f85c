"""kiln.autograd.profiler: torch.autograd.profiler's older spelling of the profiler.

``profile`` is ``kiln.profiler.profile`` with torch.autograd.profiler.profile's arguments
(``enabled``, ``use_cuda``...), ``record_function`` the same class as kiln.profiler's; see
kiln.profiler for what is recorded.
"""

from __future__ import annotations

from kiln import profiler as _profiler
from kiln.profiler import EventList, FunctionEvent, FunctionEventAvg, record_function

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "profile", "record_function"]


class profile(_profiler.profile):  # noqa: N801 - torch's name
    """Records while the block runs (no schedule); ``enabled=False`` records nothing."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, experimental_config=None, acc_events=False,
                 custom_trace_id_callback=None) -> None:
        super().__init__(record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack)
        self.enabled = enabled

    def start(self) -> None:
        if self.enabled:
            super().start()

    @property
    def function_events(self) -> EventList:
        return self.events()

    @property
    def self_cpu_time_total(self) -> float:
        return self.events().self_cpu_time_total

    def table(self, *args, **kwargs) -> str:
        return self.key_averages().table(*args, **kwargs)

    def total_average(self) -> FunctionEventAvg:
        return self.key_averages().total_average()
