"""`grpoctl ui`: serve the read-only dashboard over the registry (grpoctl/ui/).

Starlette and uvicorn come from the `ui` extra and are imported only when the command
runs, so `grpoctl --help` stays fast. On 127.0.0.1 (the default) anyone on this machine
may read it, as they may read registry.db; any other --host serves the network, and
gets an access token, printed once in the URL and never logged.
"""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError

UI_EXTRA = "pip install 'grpoctl[ui]'"


def ui(
    db: DbOption = None,
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8321,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; anything but loopback gets an access token.")
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the dashboard in a web browser.")] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between the page's polls while a run is live.")] = 2.0,
) -> None:
    """Serve a live, read-only dashboard of the registry in a web browser: runs, studies, curves, samples."""
    if not 0 < port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {port}")
    if not 0.2 <= poll <= 600:
        raise UserError(f"--poll must be between 0.2 and 600 seconds, not {poll}")
    try:
        import uvicorn

        from grpoctl.ui.app import create_app
        from grpoctl.ui.guard import is_loopback
    except ImportError as exc:
        raise UserError(f"grpoctl ui needs {exc.name} ({UI_EXTRA})") from None

    token = None if is_loopback(host) else secrets.token_urlsafe(24)
    app = create_app(db, host=host, token=token, poll_s=poll)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    typer.echo(f"grpoctl ui: {app.state.registry.public_url} at {url}  (Ctrl-C stops it)")
    if token:
        typer.echo("note: the token in that URL is the only way in; it is not printed again", err=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    # access_log off: a request's URL may carry the token.
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)
