"""numpy reference for convolution.cu: out[y, x] = sum of image[y+fy, x+fx] * filter[fy, fx]."""
import numpy as np


def convolution(image, filter, w, h):
    fh, fw = filter.shape
    image = image.astype(np.float64)
    out = np.zeros((h, w))
    for fy in range(fh):
        for fx in range(fw):
            out += image[fy:fy + h, fx:fx + w] * float(filter[fy, fx])
    return out
