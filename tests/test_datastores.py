"""Datastores and MiniBatchQueue (single process), and partitions over workers (MPI)."""

import os
import tempfile
import time

import numpy as np
import pytest

from spmdlab import SpmdTypeError, SpmdValueError, spmd_cat, spmd_index, spmd_size
from spmdlab.training import (ArrayDatastore, AugmentedImageDatastore, ImageDatastore,
                              MiniBatchQueue, count_each_label, partition, read_all,
                              split_each_label)
from spmdlab.training.datastores import TransformedDatastore

torch = pytest.importorskip("torch")


def digits_ds(n=10):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2)
    y = np.array([i % 3 for i in range(n)])
    return ArrayDatastore(x, y)


@pytest.mark.mpi_skip
def test_partition_contiguous_remainder_first():
    ds = digits_ds(10)
    parts = [partition(ds, 3, i) for i in (1, 2, 3)]
    assert [len(p) for p in parts] == [4, 3, 3]
    firsts = [p[0][0][0, 0] for p in parts]
    assert firsts == [0.0, 16.0, 28.0]  # contiguous: observations 0, 4, 7
    with pytest.raises(SpmdValueError, match="'index' must be from 1 to 3 \\(got 0\\)"):
        partition(ds, 3, 0)
    with pytest.raises(SpmdValueError, match="got 4"):
        ds.partition(3, 4)


@pytest.mark.mpi_skip
def test_shuffle_split_count_read_transform():
    ds = digits_ds(12)
    shuffled = ds.shuffle(seed=1)
    assert sorted(x[0, 0] for x, _ in shuffled) == sorted(x[0, 0] for x, _ in ds)
    assert [x[0, 0] for x, _ in ds][:3] == [0.0, 4.0, 8.0]  # the original is unchanged
    assert count_each_label(ds) == {0: 4, 1: 4, 2: 4}
    train, test = split_each_label(ds, 0.75)
    assert count_each_label(train) == {0: 3, 1: 3, 2: 3} and len(test) == 3
    a, b = split_each_label(ds, 1, randomize=True, seed=0)
    assert len(a) == 3 and len(b) == 9
    assert set(a.labels.tolist()) == {0, 1, 2}
    x, y = read_all(ds)
    assert x.shape == (12, 2, 2) and y.tolist() == [i % 3 for i in range(12)]
    doubled = ds.transform(lambda item: (item[0] * 2, item[1]))
    assert doubled[1][0][0, 0] == 8.0
    with pytest.raises(SpmdValueError, match="'amount' must be a fraction"):
        split_each_label(ds, 1.5)


def write_images(folder, per_class=4, size=(12, 10)):
    from PIL import Image

    for label in ("cat", "dog"):
        os.makedirs(os.path.join(folder, label))
        for i in range(per_class):
            value = 50 if label == "cat" else 200
            pixels = np.full(size + (3,), value, np.uint8)
            pixels[0, 0] = i
            Image.fromarray(pixels).save(os.path.join(folder, label, f"{i}.png"))


@pytest.mark.mpi_skip
def test_image_folder_and_augmentation():
    with tempfile.TemporaryDirectory() as folder:
        write_images(folder)
        ds = ImageDatastore(folder)
        assert len(ds) == 8 and ds.class_names == ["cat", "dog"]
        image, label = ds[5]
        assert image.shape == (12, 10, 3) and label == "dog" and image[1, 1, 0] == 200
        resized = AugmentedImageDatastore((6, 6), ds)
        assert resized[0][0].shape == (6, 6, 3) and resized[0][1] == "cat"
        crop = AugmentedImageDatastore((8, 8), ds, output_size_mode="centercrop")
        assert crop[0][0].shape == (8, 8, 3)
        rand = AugmentedImageDatastore((8, 8), ds, output_size_mode="randcrop",
                                       random_x_reflection=True,
                                       random_x_translation=(-2, 2),
                                       random_y_translation=(-2, 2), seed=3)
        reads = [rand[4][0] for _ in range(10)]
        assert all(r.shape == (8, 8, 3) for r in reads)
        assert any(not np.array_equal(reads[0], r) for r in reads[1:])  # new every read
        assert all(rand[i][1] == ds[i][1] for i in range(len(ds)))  # labels kept
        shifted = AugmentedImageDatastore((12, 10), ds, random_x_translation=(3, 3))
        moved = shifted[6][0]
        assert (moved[:, :3] == 0).all() and (moved[:, 3:] == 200).any()
        with pytest.raises(SpmdValueError, match="output_size_mode must be one of"):
            AugmentedImageDatastore((8, 8), ds, output_size_mode="stretch")
    with tempfile.TemporaryDirectory() as empty:
        with pytest.raises(SpmdValueError, match="ImageDatastore: no images in"):
            ImageDatastore(empty)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_mini_batch_queue(background):
    ds = digits_ds(10)
    mbq = MiniBatchQueue(ds, 4, dispatch_in_background=background)
    sizes = []
    while mbq.has_data():
        x, y = mbq.next()
        assert isinstance(x, torch.Tensor) and x.dtype == torch.float32
        sizes.append(len(x))
    assert sizes == [4, 4, 2]
    with pytest.raises(SpmdValueError, match="MiniBatchQueue.next: no more mini-batches"):
        mbq.next()
    mbq.reset()
    assert [len(x) for x, _ in mbq] == [4, 4, 2]  # the iteration protocol
    discard = MiniBatchQueue(ds, 4, partial_mini_batch="discard",
                             dispatch_in_background=background)
    assert [len(x) for x, _ in discard] == [4, 4]
    custom = MiniBatchQueue(ds, 5, mini_batch_fcn=lambda xs, ys: (
        torch.from_numpy(np.stack(xs)).reshape(len(xs), -1), torch.tensor(ys) + 100),
        dispatch_in_background=background)
    x, y = custom.next()
    assert x.shape == (5, 4) and y.tolist() == [100, 101, 102, 100, 101]
    custom.shuffle(seed=2)
    seen = sorted(v for _, y in custom for v in y.tolist())
    assert seen == sorted([100 + i % 3 for i in range(10)])
    part = MiniBatchQueue(ds, 2).partition(3, 2)
    assert [len(x) for x, _ in part] == [2, 1]
    with pytest.raises(SpmdValueError, match="'mini_batch_size' must be a positive int"):
        MiniBatchQueue(ds, 0)
    # a plain array iterates, but cannot be shuffled: said so (an AttributeError)
    plain = MiniBatchQueue(np.arange(5.0), 2, dispatch_in_background=background)
    assert [len(x) for (x,) in plain] == [2, 2, 1]
    with pytest.raises(SpmdTypeError, match="MiniBatchQueue.shuffle: the queue's data is a "
                       "ndarray, which cannot be shuffled; .*ArrayDatastore"):
        plain.shuffle()


@pytest.mark.mpi_skip
def test_mini_batch_queue_options_as_matlab():
    """String options are case-insensitive (MATLAB's are), and OutputEnvironment="gpu"
    applies to a mini-batch function's tensors too: never ignored silently."""
    ds = digits_ds(10)
    assert [len(x) for x, _ in MiniBatchQueue(ds, 4, partial_mini_batch="Discard",
                                              output_environment="CPU")] == [4, 4]
    fcn = lambda xs, ys: (torch.from_numpy(np.stack(xs)), np.asarray(ys))  # noqa: E731
    if torch.cuda.is_available():
        x, y = MiniBatchQueue(ds, 4, mini_batch_fcn=fcn, output_environment="gpu").next()
        assert x.is_cuda and isinstance(y, np.ndarray)
    else:
        with pytest.raises(SpmdValueError, match="output_environment='gpu' but no GPU"):
            MiniBatchQueue(ds, 4, mini_batch_fcn=fcn, output_environment="gpu").next()
    x, _ = MiniBatchQueue(ds, 4, mini_batch_fcn=fcn, output_environment="cpu").next()
    assert not x.is_cuda


@pytest.mark.mpi_skip
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_bad_observation_fails_the_next_that_would_return_its_mini_batch(background):
    """Mini-batches are read one ahead: the error reading the third used to come out of
    the second next(), so trainnet blamed the iteration before the bad data's."""
    def read(observation):
        if observation[0].flat[0] == 20:  # the sixth observation
            raise OSError("observation 5 is unreadable")
        return observation

    ds = TransformedDatastore(digits_ds(10), read)
    mbq = MiniBatchQueue(ds, 2, dispatch_in_background=background)
    mbq.next()
    mbq.next()
    assert mbq.has_data()
    with pytest.raises(OSError, match="observation 5 is unreadable"):
        mbq.next()
    assert not mbq.has_data()
    mbq.close()


@pytest.mark.mpi_skip
def test_an_unreadable_image_names_its_file(tmp_path):
    from PIL import Image

    os.makedirs(tmp_path / "a")
    Image.new("RGB", (4, 4)).save(tmp_path / "a" / "1.png")
    data = (tmp_path / "a" / "1.png").read_bytes()
    (tmp_path / "a" / "1.png").write_bytes(data[:len(data) // 2])
    ds = ImageDatastore(str(tmp_path))
    with pytest.raises(OSError,
                       match=r"ImageDatastore: cannot read '.*1\.png': \w+Error: "):
        ds[0]


@pytest.mark.mpi_skip
def test_images_of_mixed_colours_name_the_sizes_and_the_way_out(tmp_path):
    from PIL import Image

    os.makedirs(tmp_path / "grey")
    os.makedirs(tmp_path / "colour")
    for i in range(2):
        Image.new("L", (4, 4)).save(tmp_path / "grey" / f"{i}.png")
        Image.new("RGB", (4, 4)).save(tmp_path / "colour" / f"{i}.png")
    ds = ImageDatastore(str(tmp_path))
    sizes = r"differ in size: \(4, 4\), \(4, 4, 3\); .*color_preprocessing='gray2rgb'"
    with pytest.raises(SpmdValueError, match="read_all: the observations " + sizes):
        read_all(ds)
    with pytest.raises(SpmdValueError, match="MiniBatchQueue: the observations " + sizes):
        next(iter(MiniBatchQueue(ds, 4)))
    same = AugmentedImageDatastore((4, 4), ds, color_preprocessing="gray2rgb")
    assert read_all(same)[0].shape == (4, 4, 4, 3)


@pytest.mark.mpi_skip
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_default_mini_batches_of_an_image_folder_keep_label_names(tmp_path, background):
    """Regression: the default mini-batch function made every column a torch tensor, so
    an ImageDatastore's folder-name labels failed with torch's "can't convert np.ndarray
    of type numpy.str_"; the images become tensors, the names stay a numpy array."""
    from PIL import Image

    for name in ("cats", "dogs"):
        os.makedirs(tmp_path / name)
        for i in range(3):
            Image.new("RGB", (4, 4)).save(tmp_path / name / f"{i}.png")
    mbq = MiniBatchQueue(ImageDatastore(str(tmp_path)), 4, output_environment="cpu",
                         dispatch_in_background=background)
    batches = list(mbq)
    assert [tuple(x.shape) for x, _ in batches] == [(4, 4, 4, 3), (2, 4, 4, 3)]
    assert isinstance(batches[0][0], torch.Tensor)
    assert [y.tolist() for _, y in batches] == [["cats"] * 3 + ["dogs"], ["dogs"] * 2]


@pytest.mark.mpi_skip
@pytest.mark.parametrize("stop", ["reset", "close"])
def test_background_queue_stops_when_its_reader_stops_early(stop):
    """Regression: the dispatch thread, done reading, blocked forever handing over its
    end marker to a full queue, so reset() or close() mid-epoch never returned."""
    import threading

    mbq = MiniBatchQueue(digits_ds(10), 2, dispatch_in_background=True)
    for _ in range(2):  # (one more is taken ahead) the last 2 fill the hand-over queue
        mbq.next()
    time.sleep(0.5)  # and the thread, done reading, waits to hand over its end marker
    worker = threading.Thread(target=getattr(mbq, stop), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), f"{stop}() hung"
    if stop == "reset":
        assert [len(x) for x, _ in mbq] == [2, 2, 2, 2, 2]
    else:
        assert not mbq.has_data()


@pytest.mark.mpi
def test_partitions_over_workers_cover_everything_once():
    ds = ArrayDatastore(np.arange(23), np.zeros(23))
    mine = partition(ds.shuffle(seed=5), spmd_size(), spmd_index())
    everyone = spmd_cat(np.array([x for x, _ in mine], dtype=np.int64))
    assert sorted(everyone.tolist()) == list(range(23))
    sizes = spmd_cat(len(mine)).tolist()
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
