"""Process entry for the route-override plugin."""
def main() -> int:
    from cnichain.common.skel import run_plugin
    from cnichain.plugins.route_override.plugin import PLUGIN
    return run_plugin(PLUGIN)
if __name__ == "__main__":
    raise SystemExit(main())
