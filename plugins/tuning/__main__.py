"""Process entry for the tuning plugin."""
def main() -> int:
    from cnichain.common.skel import run_plugin
    from cnichain.plugins.tuning.plugin import PLUGIN
    return run_plugin(PLUGIN)
if __name__ == "__main__":
    raise SystemExit(main())
