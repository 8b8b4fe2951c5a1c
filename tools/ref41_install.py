"""Makes copies of the public transformers `deepseek_v41` files (carried to the device in
scratch/, never committed) importable as transformers.models.deepseek_v41, which transformers 5.17
does not ship. Used by tools/golden/make_v41_golden.py and tools/train/train.py."""
import hashlib
import importlib
import importlib.util
import os
import shutil

REF_FILES = ("__init__.py", "configuration_deepseek_v41.py", "modeling_deepseek_v41.py")


def install_reference(ref_dir):
    """Returns (configuration module, modeling module, {"installed_at", "sha256" per file})."""
    root = importlib.util.find_spec("transformers").submodule_search_locations[0]
    dst = os.path.join(root, "models", "deepseek_v41")
    os.makedirs(dst, exist_ok=True)
    digests = {}
    for f in REF_FILES:
        shutil.copyfile(os.path.join(ref_dir, f), os.path.join(dst, f))
        digests[f] = hashlib.sha256(open(os.path.join(ref_dir, f), "rb").read()).hexdigest()
    configuration = importlib.import_module("transformers.models.deepseek_v41.configuration_deepseek_v41")
    modeling = importlib.import_module("transformers.models.deepseek_v41.modeling_deepseek_v41")
    return configuration, modeling, {"installed_at": dst, "sha256": digests}
