"""Process entry for the host-local plugin."""
def main() -> int:
    from cnichain.common.skel import run_plugin
    from cnichain.plugins.host_local.plugin import PLUGIN
    return run_plugin(PLUGIN)
if __name__ == "__main__":
    raise SystemExit(main())
