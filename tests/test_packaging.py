"""setup.cfg lists every package of the tree, under the names it installs as."""
import configparser
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: folders at the top of the repository and the import names they install as
TOP_LEVEL = {"tegrad": "tegrad", "solver": "tegrad.solver", "codegen": "tegrad.codegen"}


def packages_in_tree():
    found = set()
    for folder, name in TOP_LEVEL.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name,) + rel))
    return found


def test_setup_cfg_lists_every_package():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    assert listed == packages_in_tree()


def test_package_dir_maps_the_top_level_folders():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    mapping = dict(line.split(" = ") for line in cfg["options"]["package_dir"].split("\n") if line)
    assert mapping == {name: folder for folder, name in TOP_LEVEL.items() if folder != "tegrad"}
