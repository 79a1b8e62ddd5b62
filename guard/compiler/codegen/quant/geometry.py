"""The shape facts of an int8 convolution (quant/conv.py, quant/im2col.py, the split rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QConvGeometry:
    N: int
    C: int
    H: int
    W: int
    K: int
    Cg: int
    R: int
    S: int
    g: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    OH: int
    OW: int
    r0: int
    r1: int

    @classmethod
    def of(
        cls, attrs: Mapping[str, Any], xshape: Sequence[int], wshape: Sequence[int]
    ) -> QConvGeometry:
        n, c, h, w = (int(d) for d in xshape)
        k, cg, r, s = (int(d) for d in wshape)
        sh, sw = (int(v) for v in attrs["strides"])
        dh, dw = (int(v) for v in attrs["dilations"])
        pt, pl, pb, pr = (int(v) for v in attrs["pads"])
        oh = (h + pt + pb - dh * (r - 1) - 1) // sh + 1
        ow = (w + pl + pr - dw * (s - 1) - 1) // sw + 1
        r0, r1 = attrs.get("rows") or (0, oh)
        return cls(n, c, h, w, k, cg, r, s, int(attrs["group"]), sh, sw, dh, dw, pt, pl, oh,
                   ow, int(r0), int(r1))  # fmt: skip

    @property
    def Kg(self) -> int:
        return self.K // self.g

    @property
    def Cp(self) -> int:
        return -(-self.Cg // 4) * 4

    @property
    def taps_grouped(self) -> bool:
        """One input channel per group (depthwise): the groups of four run over the kernel
        taps, not over channels (a 3 x 3 depthwise kernel is 3 groups, not 9 x 4 bytes)."""
        return self.Cg == 1

    @property
    def KG(self) -> int:
        if self.taps_grouped:
            return -(-self.R * self.S // 4)
        return self.R * self.S * self.Cp // 4

    @property
    def Kp(self) -> int:
        return 4 * self.KG

    @property
    def flat(self) -> bool:
        return (self.R, self.S, self.sh, self.sw, self.pt, self.pl) == (1, 1, 1, 1, 0, 0) and (
            self.OH,
            self.OW,
        ) == (self.H, self.W)

    @property
    def macs(self) -> int:
        return self.N * self.K * (self.r1 - self.r0) * self.OW * self.Cg * self.R * self.S

    def task_cost(self, direct: bool, mac_flops: float, element_flops: int) -> int:
        """The thread-split rule's cost (codegen/split.py): the MACs at the int8 rate and the
        im2col's bytes; a direct depthwise kernel (quant/depthwise*.py) packs nothing and
        runs at about a float conv's rate."""
        if direct:
            return 2 * self.macs
        packed = self.N * self.g * self.OH * self.OW * self.Kp
        return int(self.macs * mac_flops) + packed * element_flops // 4
