"""Process entry for the portmap plugin."""
def main() -> int:
    from cnichain.common.skel import run_plugin
    from cnichain.plugins.portmap.plugin import PLUGIN
    return run_plugin(PLUGIN)
if __name__ == "__main__":
    raise SystemExit(main())
