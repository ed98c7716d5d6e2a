"""NvmlSampler's reading of NVML, against a stand-in with pynvml's functions, errors and units.

This machine has no NVIDIA driver; the real library's failure is covered in test_agent.py, and
scripts/gpu_check.sh checks the real thing on a GPU machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from cli.host.nvml_agent import NvmlSampler, SamplingError
from guardrails.errors import ParkbrakeError
from guardrails.idle import GpuSample


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's own name
    pass


class NVMLError_NotFound(NVMLError):  # pynvml's own name
    pass


@dataclass
class FakeGpu:
    uuid: bytes | str
    utilization: int
    memory_used: int
    temperature: int
    power_milliwatts: int | None  # None: not supported
    pids: list[int] = field(default_factory=list)
    lost: bool = False
    memory_copy: int = 0  # percent
    # The driver's utilisation samples (CPU timestamps, µs); None: the GPU keeps none (NotSupported).
    utilization_samples: list[int] | None = field(default_factory=lambda: [1_000_000, 1_166_666])


@dataclass
class FakeNvml:
    """The subset of pynvml the sampler calls, with the same names, units and exceptions."""

    gpus: list[FakeGpu]
    init_error: str | None = None
    shut_down: bool = False
    NVMLError: type[Exception] = NVMLError
    NVMLError_NotSupported: type[Exception] = NVMLError_NotSupported
    NVMLError_NotFound: type[Exception] = NVMLError_NotFound
    NVML_TEMPERATURE_GPU: int = 0
    NVML_GPU_UTILIZATION_SAMPLES: int = 1

    def nvmlInit(self) -> None:
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> bytes | str:
        return gpu.uuid

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        if gpu.lost:
            raise NVMLError("GPU is lost")
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.memory_copy)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(used=gpu.memory_used, total=150_754_820_096)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if gpu.power_milliwatts is None:
            raise NVMLError_NotSupported("Not Supported")
        return gpu.power_milliwatts

    def nvmlDeviceGetSamples(
        self, gpu: FakeGpu, sampling_type: int, last_seen: int
    ) -> tuple[int, list[SimpleNamespace]]:
        assert sampling_type == self.NVML_GPU_UTILIZATION_SAMPLES
        if gpu.utilization_samples is None:
            raise NVMLError_NotSupported("Not Supported")
        kept = [stamp for stamp in gpu.utilization_samples if stamp > last_seen]
        if not kept:
            raise NVMLError_NotFound("Not Found")
        return 1, [
            SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=gpu.utilization))
            for stamp in kept
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=1) for pid in gpu.pids]


def h200s() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(b"GPU-5f0c1e2a", 97, 120 * 2**30, 63, 655_500, [4242], memory_copy=41),
            FakeGpu("GPU-a93b7c44", 0, 548 * 2**20, 31, None, utilization_samples=None),
        ]
    )


def test_every_gpu_is_read_in_the_exported_units() -> None:
    sampler = NvmlSampler(h200s())
    assert sampler.sample() == [
        GpuSample(0, "GPU-5f0c1e2a", 97.0, 120 * 2**30, 63.0, 655.5, (4242,), 41.0, 1_166_666),
        GpuSample(1, "GPU-a93b7c44", 0.0, 548 * 2**20, 31.0, None, (), 0.0, None),
    ]


def test_the_utilisation_counter_timestamp_is_the_drivers_newest_sample() -> None:
    nvml = h200s()
    sampler = NvmlSampler(nvml)
    nvml.gpus[0].utilization_samples = [1_000_000, 1_166_666, 1_333_333]
    assert sampler.sample()[0].counter_timestamp_us == 1_333_333
    nvml.gpus[0].utilization_samples = []  # the driver's buffer holds nothing: NVML answers NotFound
    assert sampler.sample()[0].counter_timestamp_us is None


def test_a_gpu_lost_mid_run_is_a_failed_sample_not_a_crash() -> None:
    nvml = h200s()
    sampler = NvmlSampler(nvml)
    nvml.gpus[1].lost = True
    with pytest.raises(SamplingError, match="NVML: GPU is lost"):
        sampler.sample()
    nvml.gpus[1].lost = False
    assert len(sampler.sample()) == 2


def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(
        ParkbrakeError, match="NVML is not available: Driver Not Loaded; the agent needs an NVIDIA"
    ):
        NvmlSampler(FakeNvml([], init_error="Driver Not Loaded"))


def test_no_gpu_is_a_clear_error_and_nvml_is_shut_down() -> None:
    nvml = FakeNvml([])
    with pytest.raises(ParkbrakeError, match="NVML sees no GPU on this host"):
        NvmlSampler(nvml)
    assert nvml.shut_down


def test_close_shuts_nvml_down() -> None:
    nvml = h200s()
    NvmlSampler(nvml).close()
    assert nvml.shut_down
