"""numpy reference for conv2d.c: out[y, x] = sum over the filter of image[y+fy, x+fx] * filter."""
import numpy as np


def conv2d(image, filter, w, h):
    fh, fw = filter.shape
    out = np.zeros((h, w))
    for fy in range(fh):
        for fx in range(fw):
            out += image[fy:fy + h, fx:fx + w].astype(np.float64) * float(filter[fy, fx])
    return out
