import numpy as np

INDEX_DTYPE: np.dtype[np.void]
