"""What a stopped host still costs: its EBS volumes, priced per GB-month from the price table.

Pure: the sweep lists the volumes (``DescribeVolumes``) and passes them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from guardrails.pricing import PriceNotFound, PriceTable


@dataclass(frozen=True)
class Volume:
    volume_id: str
    size_gb: int
    volume_type: str  # gp3, gp2, io2, …

    @classmethod
    def from_description(cls, volume: Mapping[str, Any]) -> Volume:
        """One ``Volumes[]`` entry of ``DescribeVolumes``."""
        return cls(volume["VolumeId"], int(volume["Size"]), str(volume.get("VolumeType") or "standard"))


@dataclass(frozen=True)
class Storage:
    """A host's volumes and what they cost a month; ``unpriced`` volume types are not in the total."""

    volumes: tuple[Volume, ...]
    monthly_usd: Decimal
    unpriced: tuple[str, ...] = ()

    @property
    def size_gb(self) -> int:
        return sum(volume.size_gb for volume in self.volumes)

    def describe(self) -> str:
        """``2 volumes (1,100 GB) cost $88.00 a month``, naming any type without a price."""
        count = len(self.volumes)
        text = (
            f"{count} volume{'s' if count != 1 else ''} ({self.size_gb:,} GB) cost "
            f"${self.monthly_usd:,.2f} a month"
        )
        if self.unpriced:
            text += f" (plus {', '.join(self.unpriced)} volumes: no price in the price table)"
        return text


def storage_of(volumes: Iterable[Volume], prices: PriceTable, region: str) -> Storage:
    """Each volume's size × the region's ``ebs_<type>_gb_month`` price; an unknown price is named, never guessed."""
    chosen = tuple(sorted(volumes, key=lambda volume: volume.volume_id))
    total = Decimal(0)
    unpriced: set[str] = set()
    for volume in chosen:
        try:
            total += volume.size_gb * prices.service(f"ebs_{volume.volume_type}_gb_month", region)
        except PriceNotFound:
            unpriced.add(volume.volume_type)
    return Storage(chosen, total, tuple(sorted(unpriced)))
