"""Datastores: in-memory arrays, image folders, transforms and augmented images.

Every datastore is an ordered view of its observations: ``len(ds)`` of them, ``ds[i]``
one (an ``(input, label)`` pair when labels exist, else the input). ``shuffle``,
``partition``, ``subset``, ``split_each_label`` and ``transform`` return new datastores
over the same data (nothing is copied). Images are numpy arrays ``(height, width,
channels)``, as MATLAB reads them; a mini-batch function turns them into tensors.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, TypeVar

import numpy as np

from ..errors import SpmdTypeError, SpmdValueError

__all__ = ["ArrayDatastore", "AugmentedImageDatastore", "Datastore", "ImageDatastore",
           "count_each_label", "partition", "read_all", "split_each_label"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".ppm")


D = TypeVar("D", bound="Datastore")


class Datastore:
    """What every datastore shares: observations read one at a time in the datastore's
    order, with optional labels; ``shuffle``, ``partition``, ``transform``, ``read_all``.

    Examples
    --------
    >>> ds = ArrayDatastore(np.eye(4), ["a", "b", "a", "b"])
    >>> len(ds), ds.class_names
    (4, ['a', 'b'])
    >>> ds.shuffle(seed=0).partition(2, 1).labels.tolist()
    ['a', 'a']

    MATLAB
    ------
    ``imds = imageDatastore(...); shuffle(imds); partition(imds, N, k)``
    """

    def __init__(self, count: int, labels: Any = None, order: Any = None) -> None:
        self._count = count
        self._labels = None if labels is None else np.asarray(labels)
        self._order = np.arange(count) if order is None else np.asarray(order)

    # what subclasses provide
    def _read(self, k):
        raise NotImplementedError

    def _view(self, order):
        """A datastore like this one over ``order`` (indices into the source)."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._order = np.asarray(order, dtype=np.int64)
        return view

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, i: int) -> Any:
        k = self._order[i]
        x = self._read(k)
        return x if self._labels is None else (x, self._labels[k])

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    @property
    def labels(self) -> Optional[np.ndarray]:
        """The labels in this datastore's order (None without labels)."""
        return None if self._labels is None else self._labels[self._order]

    @property
    def class_names(self) -> Optional[List[Any]]:
        """The distinct labels, sorted."""
        if self._labels is None:
            return None
        return sorted(set(self._labels.tolist()))

    def shuffle(self: D, seed: Optional[int] = None) -> D:
        """A new datastore with the observations in random order."""
        rng = np.random.default_rng(seed)
        return self._view(self._order[rng.permutation(len(self._order))])

    def subset(self: D, indices: Any) -> D:
        """A new datastore of the observations at ``indices`` (0-based, this order)."""
        return self._view(self._order[np.asarray(indices, dtype=np.int64)])

    def partition(self: D, n: int, index: int) -> D:
        """Part ``index`` (1-based) of ``n`` contiguous parts; see ``partition``."""
        return partition(self, n, index)

    def transform(self, fcn: Callable[[Any], Any]) -> TransformedDatastore:
        """A datastore whose observations are ``fcn(observation)``."""
        if not callable(fcn):
            raise SpmdTypeError(f"transform: 'fcn' must be callable (got {fcn!r})")
        return TransformedDatastore(self, fcn)

    def read_all(self) -> Any:
        """Every observation at once; see ``read_all``."""
        return read_all(self)


class ArrayDatastore(Datastore):
    """Observations along the first dimension of an array or tensor, with labels.

    Examples
    --------
    >>> ds = ArrayDatastore(np.zeros((6, 8, 8)), np.arange(6) % 2)
    >>> x, label = ds[3]
    >>> x.shape, label
    ((8, 8), np.int64(1))

    MATLAB
    ------
    ``arrayDatastore(X)`` combined with the labels
    """

    def __init__(self, data: Any, labels: Any = None) -> None:
        if labels is not None and len(labels) != len(data):
            raise SpmdValueError(f"ArrayDatastore: {len(data)} observations but "
                                 f"{len(labels)} labels")
        super().__init__(len(data), labels)
        self._data = data

    def _read(self, k):
        return self._data[k]


class ImageDatastore(Datastore):
    """Image files in a folder, labelled by their sub-folder's name (MATLAB
    ``imageDatastore(folder, IncludeSubfolders=true, LabelSource="foldernames")``).

    Examples
    --------
    >>> import tempfile
    >>> from PIL import Image
    >>> root = tempfile.mkdtemp()
    >>> for name in ("cats", "dogs"):
    ...     os.makedirs(os.path.join(root, name))
    ...     Image.new("RGB", (4, 4)).save(os.path.join(root, name, "1.png"))
    >>> images = ImageDatastore(root)
    >>> len(images), images.class_names, images[0][0].shape
    (2, ['cats', 'dogs'], (4, 4, 3))

    MATLAB
    ------
    ``imageDatastore(folder, IncludeSubfolders=true, LabelSource="foldernames")``
    """

    _images = True  # observations are (height, width[, channels]) images; see trainnet

    def __init__(self, folder: str, labels: Any = "foldernames") -> None:
        if not os.path.isdir(folder):
            raise SpmdValueError(f"ImageDatastore: {folder!r} is not a folder")
        files = []
        for root, dirs, names in os.walk(folder):
            dirs.sort()
            files += [os.path.join(root, n) for n in sorted(names)
                      if n.lower().endswith(IMAGE_EXTENSIONS)]
        if not files:
            raise SpmdValueError(f"ImageDatastore: no images in {folder!r} or its "
                                 f"sub-folders (looked for {', '.join(IMAGE_EXTENSIONS)})")
        if labels == "foldernames":
            labels = [os.path.basename(os.path.dirname(f)) for f in files]
        elif labels is not None:
            raise SpmdValueError(f"ImageDatastore: labels must be 'foldernames' or None "
                                 f"(got {labels!r})")
        super().__init__(len(files), labels)
        self.files = files

    def _read(self, k):
        from PIL import Image

        path = self.files[k]
        try:
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB") if image.mode not in ("L", "RGB")
                                  else image)
        except Exception as exc:  # a truncated or corrupt file: say which
            raise _naming(exc, f"ImageDatastore: cannot read {path!r}") from exc


def _naming(exc, text):
    """``exc`` again, its message led by ``text`` (where it happened): of the same class
    where one can be made from a message (``except OSError`` still catches a truncated
    image), else SpmdValueError."""
    message = f"{text}: {type(exc).__name__}: {exc}"
    try:
        error = type(exc)(message)
        if isinstance(error, type(exc)) and str(error) == message:
            return error
    except Exception:
        pass
    return SpmdValueError(message)


class TransformedDatastore(Datastore):
    """``fcn`` applied to every observation of another datastore."""

    def __init__(self, source: Datastore, fcn: Callable[[Any], Any]) -> None:
        super().__init__(len(source))
        self._source = source
        self._fcn = fcn

    def _read(self, k):
        return self._fcn(self._source[k])


class AugmentedImageDatastore(Datastore):
    """Images resized or cropped to ``output_size``, randomly augmented on every read.

    MATLAB ``augmentedImageDatastore(outputSize, imds, DataAugmentation=...)`` with an
    ``imageDataAugmenter``: ``random_x_reflection`` (left-right flip with probability
    1/2), ``random_x_translation`` / ``random_y_translation`` (``(lo, hi)`` pixels, an
    integer shift drawn uniformly, the uncovered border filled with 0). ``output_size_mode``
    is ``"resize"``, ``"centercrop"`` or ``"randcrop"``. Each read draws new random
    values, so every epoch sees new augmentations; ``seed`` makes them reproducible.

    Examples
    --------
    >>> ds = ArrayDatastore(np.zeros((4, 32, 32, 3), dtype=np.uint8), np.arange(4))
    >>> augmented = AugmentedImageDatastore((28, 28), ds, random_x_reflection=True,
    ...                                     output_size_mode="randcrop", seed=0)
    >>> augmented[0][0].shape
    (28, 28, 3)

    MATLAB
    ------
    ``augmentedImageDatastore([28 28], imds, DataAugmentation=imageDataAugmenter(...))``
    """

    MODES = ("resize", "centercrop", "randcrop")
    _images = True

    def __init__(self, output_size: Sequence[int], source: Datastore, *,
                 random_x_reflection: bool = False,
                 random_x_translation: Tuple[int, int] = (0, 0),
                 random_y_translation: Tuple[int, int] = (0, 0),
                 output_size_mode: Literal["resize", "centercrop", "randcrop"] = "resize",
                 color_preprocessing: Literal["none", "gray2rgb", "rgb2gray"] = "none",
                 seed: Optional[int] = None) -> None:
        if output_size_mode not in self.MODES:
            raise SpmdValueError(f"AugmentedImageDatastore: output_size_mode must be one "
                                 f"of {', '.join(self.MODES)} (got {output_size_mode!r})")
        if color_preprocessing not in ("none", "gray2rgb", "rgb2gray"):
            raise SpmdValueError(f"AugmentedImageDatastore: color_preprocessing must be "
                                 f"'none', 'gray2rgb' or 'rgb2gray' "
                                 f"(got {color_preprocessing!r})")
        size = tuple(int(s) for s in output_size)[:2]
        if len(size) != 2 or min(size) < 1:
            raise SpmdValueError(f"AugmentedImageDatastore: output_size must be (height, "
                                 f"width) (got {output_size!r})")
        for name, rng in (("random_x_translation", random_x_translation),
                          ("random_y_translation", random_y_translation)):
            if len(rng) != 2 or rng[0] > rng[1]:
                raise SpmdValueError(f"AugmentedImageDatastore: {name} must be (lo, hi) "
                                     f"with lo <= hi (got {rng!r})")
        super().__init__(len(source), None)
        self._source = source
        self.output_size = size
        self.mode = output_size_mode
        self.reflect = bool(random_x_reflection)
        self.dx = tuple(int(v) for v in random_x_translation)
        self.dy = tuple(int(v) for v in random_y_translation)
        self.color = color_preprocessing
        self._rng = np.random.default_rng(seed)

    @property
    def labels(self) -> Optional[np.ndarray]:
        return self._source.labels[self._order] if self._source.labels is not None else None

    @property
    def class_names(self) -> Optional[List[Any]]:
        return self._source.class_names

    def __getitem__(self, i: int) -> Any:
        item = self._source[int(self._order[i])]
        if isinstance(item, tuple):
            return (self._augment(item[0]),) + tuple(item[1:])
        return self._augment(item)

    def _augment(self, image):
        from PIL import Image

        image = np.asarray(image)
        if self.color == "gray2rgb" and (image.ndim == 2 or image.shape[-1] == 1):
            image = np.repeat(image.reshape(image.shape[0], image.shape[1], 1), 3, axis=2)
        elif self.color == "rgb2gray" and image.ndim == 3 and image.shape[-1] == 3:
            image = (image @ np.array([0.2989, 0.587, 0.114])).astype(image.dtype)
        h, w = self.output_size
        if self.mode == "resize":
            if image.shape[:2] != (h, w):
                pil = Image.fromarray(image.squeeze() if image.ndim == 3 and
                                      image.shape[-1] == 1 else image)
                resized = np.asarray(pil.resize((w, h), Image.BILINEAR))
                image = resized.reshape((h, w) + image.shape[2:])
        else:
            if image.shape[0] < h or image.shape[1] < w:
                raise SpmdValueError(f"AugmentedImageDatastore: a {image.shape[:2]} image "
                                     f"is smaller than the {self.mode} size {(h, w)}")
            if self.mode == "centercrop":
                top, left = (image.shape[0] - h) // 2, (image.shape[1] - w) // 2
            else:
                top = int(self._rng.integers(0, image.shape[0] - h + 1))
                left = int(self._rng.integers(0, image.shape[1] - w + 1))
            image = image[top:top + h, left:left + w]
        if self.reflect and self._rng.random() < 0.5:
            image = image[:, ::-1]
        sx = int(self._rng.integers(self.dx[0], self.dx[1] + 1)) if self.dx != (0, 0) else 0
        sy = int(self._rng.integers(self.dy[0], self.dy[1] + 1)) if self.dy != (0, 0) else 0
        if sx or sy:
            image = _shift(image, sy, sx)
        return np.ascontiguousarray(image)


def _shift(image, dy, dx):
    """``image`` moved down ``dy`` and right ``dx`` pixels, the uncovered border 0."""
    out = np.zeros_like(image)
    h, w = image.shape[:2]
    src_y = slice(max(0, -dy), min(h, h - dy))
    dst_y = slice(max(0, dy), min(h, h + dy))
    src_x = slice(max(0, -dx), min(w, w - dx))
    dst_x = slice(max(0, dx), min(w, w + dx))
    if src_y.start < src_y.stop and src_x.start < src_x.stop:
        out[dst_y, dst_x] = image[src_y, src_x]
    return out


def stack(values, call):
    """``numpy.stack`` of observations, or an SpmdValueError that names ``call`` and the
    sizes that differ (images of one folder in grey and in colour, or of two sizes)."""
    arrays = [np.asarray(v) for v in values]
    try:
        return np.stack(arrays)
    except ValueError:
        shapes = sorted({a.shape for a in arrays}, key=str)
        if len(shapes) < 2:
            raise
        sizes = ", ".join(map(str, shapes[:4])) + (" ..." if len(shapes) > 4 else "")
        raise SpmdValueError(
            f"{call}: the observations differ in size: {sizes}; images "
            f"of several sizes or colours "
            f"can be made one with AugmentedImageDatastore(output_size, ds, "
            f"color_preprocessing='gray2rgb')") from None


def partition(ds: D, n: int, index: int) -> D:
    """Part ``index`` (1-based) of ``n`` contiguous parts of ``ds`` (MATLAB ``partition``).

    Parts get ``floor(len/n)`` observations, the remainder one each to the first parts:
    10 observations into 3 parts give 4, 3, 3. Raises SpmdValueError for an index outside
    1..n.

    Parameters
    ----------
    ds
        The datastore to split.
    n
        The number of parts (usually ``spmd_size()``).
    index
        The part to return, 1-based (usually ``spmd_index()``).

    Examples
    --------
    >>> ds = ArrayDatastore(np.arange(10), np.zeros(10))
    >>> [len(partition(ds, 3, k)) for k in (1, 2, 3)]
    [4, 3, 3]

    MATLAB
    ------
    ``partition(imds, N, spmdIndex)``
    """
    for name, value in (("n", n), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SpmdTypeError(f"partition: '{name}' must be an int (got {value!r})")
    if n < 1:
        raise SpmdValueError(f"partition: 'n' must be at least 1 (got {n})")
    if not 1 <= index <= n:
        raise SpmdValueError(f"partition: 'index' must be from 1 to {n} (got {index}); "
                             f"partition indices are 1-based, as in MATLAB")
    base, extra = divmod(len(ds), int(n))
    start = (index - 1) * base + min(index - 1, extra)
    stop = start + base + (1 if index <= extra else 0)
    return ds.subset(np.arange(start, stop))


def count_each_label(ds: Datastore) -> Dict[Any, int]:
    """``{label: count}`` in sorted label order (MATLAB ``countEachLabel``).

    Examples
    --------
    >>> count_each_label(ArrayDatastore(np.zeros(5), ["a", "b", "a", "a", "b"]))
    {'a': 3, 'b': 2}

    MATLAB
    ------
    ``countEachLabel(imds)``
    """
    labels = ds.labels
    if labels is None:
        raise SpmdValueError("count_each_label: this datastore has no labels")
    names, counts = np.unique(labels, return_counts=True)
    return {name.item() if hasattr(name, "item") else name: int(c)
            for name, c in zip(names, counts)}


def split_each_label(ds: D, amount: float, randomize: bool = False,
                     seed: Optional[int] = None) -> Tuple[D, D]:
    """Two datastores: ``amount`` of every label (a fraction in (0, 1) or a count) and
    the rest (MATLAB ``splitEachLabel``); in datastore order unless ``randomize``.

    Examples
    --------
    >>> ds = ArrayDatastore(np.arange(10), [0, 1] * 5)
    >>> train, test = split_each_label(ds, 0.8)
    >>> len(train), len(test)
    (8, 2)

    MATLAB
    ------
    ``[imdsTrain, imdsTest] = splitEachLabel(imds, 0.8, "randomized")``
    """
    labels = ds.labels
    if labels is None:
        raise SpmdValueError("split_each_label: this datastore has no labels")
    is_fraction = isinstance(amount, float) and 0 < amount < 1
    is_count = isinstance(amount, (int, np.integer)) and not isinstance(amount, bool) \
        and amount >= 0
    if not (is_fraction or is_count):
        raise SpmdValueError(f"split_each_label: 'amount' must be a fraction in (0, 1) or a "
                             f"count >= 0 (got {amount!r})")
    rng = np.random.default_rng(seed)
    first: List[Any] = []
    second: List[Any] = []
    for name in np.unique(labels):
        idx = np.flatnonzero(labels == name)
        if randomize:
            idx = idx[rng.permutation(len(idx))]
        take = int(round(amount * len(idx))) if is_fraction else min(int(amount), len(idx))
        first.extend(idx[:take])
        second.extend(idx[take:])
    return ds.subset(np.sort(first)), ds.subset(np.sort(second))


def read_all(ds: Datastore) -> Any:
    """Every observation: ``(inputs stacked, labels)`` with labels, else inputs stacked.

    Examples
    --------
    >>> x, y = read_all(ArrayDatastore(np.ones((3, 2)), [0, 1, 0]))
    >>> x.shape, y.tolist()
    ((3, 2), [0, 1, 0])

    MATLAB
    ------
    ``readall(ds)``
    """
    items = [ds[i] for i in range(len(ds))]
    if not items:
        raise SpmdValueError("read_all: the datastore is empty")
    if isinstance(items[0], tuple):
        return stack([x for x, *_ in items], "read_all"), np.asarray([y for _, y in items])
    return stack(items, "read_all")
