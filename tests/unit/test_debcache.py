"""The deb cache locator (tools/debcache.py) on a cache laid out as ./run lays it out."""

from __future__ import annotations

from cnichain.tools import debcache


def test_unpacked_packages_are_found_by_suite(tmp_path, monkeypatch):
    monkeypatch.setenv("CNICHAIN_DEB_CACHE", str(tmp_path))
    pkg = tmp_path / "sid" / "containernetworking-plugins"
    (pkg / "usr" / "lib" / "cni").mkdir(parents=True)
    (pkg / "VERSION").write_text("1.9.1+ds1-1\n")
    assert debcache.version("sid", "containernetworking-plugins") == "1.9.1+ds1-1"
    assert debcache.reference_plugins_dir("sid") == str(pkg / "usr" / "lib" / "cni")
    assert debcache.resolve_plugins_dir("debian:sid") == str(pkg / "usr" / "lib" / "cni")
    assert debcache.resolve_plugins_dir("/usr/lib/cni") == "/usr/lib/cni"


def test_a_package_without_its_version_file_is_absent(tmp_path, monkeypatch):
    """./run renames a package into place whole; without VERSION it was never finished."""
    monkeypatch.setenv("CNICHAIN_DEB_CACHE", str(tmp_path))
    (tmp_path / "sid" / "containerd" / "usr" / "bin").mkdir(parents=True)
    assert debcache.containerd_bin_dir("sid") is None and debcache.version("sid", "containerd") is None
    assert debcache.resolve_plugins_dir("debian:trixie") is None
