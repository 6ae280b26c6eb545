"""numpy reference for pnpoly.cuu: the even-odd rule, one polygon edge at a time, in float32
with the kernel's very expression (a point on an edge is decided the same way)."""
import numpy as np


def pnpoly(points, vertices):
    px, py = points[:, 0], points[:, 1]
    odd = np.zeros(len(points), dtype=bool)
    for k in range(len(vertices)):
        (xj, yj), (xk, yk) = vertices[k - 1], vertices[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            x_at = (xj - xk) * (py - yk) / (yj - yk) + xk
        odd ^= ((yk > py) != (yj > py)) & (px < x_at)
    return odd.astype(np.float64)
