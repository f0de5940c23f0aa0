"""How ``packread inspect`` and ``packread convert`` tell an image source (what
:class:`packread.ImageReader` reads) from the array sources they always read, without
changing what an NPY/NPZ folder, an NPZ file or a ZIP of arrays is taken for:

- a folder with no ``.npy`` or ``.npz`` files of its own and at least one sub-folder is an
  ``ImageFolder`` tree (``root/<class>/<file>``; :class:`~packread.ImageReader` checks the
  rest: class folders, each with image files);
- a ZIP archive (not ``.npz``) at least half of whose members are named as images
  (:data:`packread._image.IMG_EXTENSIONS`, torchvision's) is a ZIP of images, labelled by its
  ``dataset.json`` or by the class folders inside it.
"""

from __future__ import annotations

import os

from .._image import IMG_EXTENSIONS, holds_images
from .._image import is_image_tree as _is_image_tree
from .._sources import classify
from ..errors import UnsupportedError


def is_image_name(name: str) -> bool:
    """Whether ``torchvision.datasets.ImageFolder`` (and :class:`~packread.ImageReader`) takes
    a file of this name for an image."""
    return name.lower().endswith(IMG_EXTENSIONS)


def is_image_tree(path: str) -> bool:
    """A folder of class folders, and no ``.npy`` or ``.npz`` file of its own: the rule
    :func:`packread.open_reader` (and so the torch datasets) open a folder as images by. A
    folder of loose images, with no class folder, is refused with :func:`loose_images_error`."""
    return _is_image_tree(path)


def loose_images(path: str) -> int:
    """Image files directly in the folder ``path``."""
    return sum(1 for e in os.scandir(path) if e.is_file() and is_image_name(e.name))


def loose_images_error(path: str, count: int) -> UnsupportedError:
    return UnsupportedError(
        f"{path}: {count:,} image files but no class folders; packread reads a folder of "
        f"images as an ImageFolder tree ({path}/<class>/<file>), and a ZIP of images as it is "
        "(zip -0 packs them without deflating)"
    )


def image_members(names: list[str]) -> tuple[int, int]:
    """``(images, files)``: members named as images, and all members but folders."""
    files = [n for n in names if not n.endswith("/")]
    return sum(1 for n in files if is_image_name(n)), len(files)


def is_image_zip(path: str) -> bool:
    """A ZIP archive that :func:`packread.open` opens as images (the format registry's rule:
    at least half of its files are images, besides its ``dataset.json``)."""
    if path.lower().endswith(".npz"):
        return False
    return holds_images(classify(path))
