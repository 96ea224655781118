"""The dashboard's Starlette app: `create_app(db)` opens the registry read-only and
serves the page, its static files and the JSON API (api.py), behind guard.py.

Read-only throughout: the registry is opened as the read commands open it (an older
PostgreSQL schema is refused in one line), its engine cannot write, and on PostgreSQL
it holds at most 2 connections with a statement timeout (registry/engine.py). Before
every API answer the schema revision is checked again, so a registry upgraded under a
running server (by a newer grpoctl) is refused rather than misread. An error is a JSON
answer with one line: 400 bad input, 404 not found, 503 registry trouble, never a
traceback page; the registry's password appears in neither answers nor logs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from grpoctl.errors import UserError
from grpoctl.formatting import json_safe
from grpoctl.registry import Registry, schema
from grpoctl.registry.open import as_user_error, printable_location
from grpoctl.ui import api, params
from grpoctl.ui.guard import Guard, is_loopback

STATIC = Path(__file__).parent / "static"
DEFAULT_POLL_S = 2.0
log = logging.getLogger("grpoctl.ui")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"cache-control": "no-store"})


def create_app(
    db: str | None, host: str = "127.0.0.1", token: str | None = None, poll_s: float = DEFAULT_POLL_S
) -> Starlette:
    """The app over the registry at `db`. A `host` other than a loopback address needs a
    `token` (guard.py); UserError if the registry cannot be read."""
    if not is_loopback(host) and not token:
        raise UserError(f"--host {host} serves the registry beyond this machine: it needs an access token")
    registry = Registry(db, must_exist=True, readonly=True, server=True)
    import scipy.stats  # noqa: F401  (compare's tests: imported now, not by the first page that compares)

    api.warm_up(registry)

    location = printable_location(registry.url)
    sqlite = registry.url.get_backend_name() == "sqlite"

    def endpoint(handler, *args_from_path):
        def answer(request: Request):
            try:
                if sqlite:
                    revision = registry.schema_revision()
                    if revision != schema.HEAD:
                        return _error(
                            503,
                            f"registry {location} changed under the dashboard (schema revision {revision}, this "
                            f"grpoctl reads {schema.HEAD}): restart `grpoctl ui` with a grpoctl that reads it",
                        )
                path_args = [request.path_params[name] for name in args_from_path]
                body = handler(registry, request, *path_args)
            except params.BadRequest as exc:
                return _error(400, str(exc))
            except api.NotFound as exc:
                return _error(404, str(exc))
            except UserError as exc:
                return _error(400, str(exc))
            except Exception as exc:
                user_error = as_user_error(exc)  # a database failure, as one line without the password
                if user_error is not None:
                    log.warning("registry error: %s", user_error)
                    return _error(503, str(user_error))
                log.exception("dashboard bug answering %s", request.url.path)
                return _error(500, f"internal error ({type(exc).__name__}); the server's log has the details")
            try:  # curves come without NaN already: walking 30,000 numbers again costs
                return JSONResponse(body, headers={"cache-control": "no-store"})
            except ValueError:
                return JSONResponse(json_safe(body), headers={"cache-control": "no-store"})

        return answer

    def meta(reg, request):
        return api.meta(reg, request, poll_s, location)

    def index(request: Request):
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    routes = [
        Route("/", index),
        Route("/api/meta", endpoint(meta)),
        Route("/api/runs", endpoint(api.runs)),
        Route("/api/studies/{name}", endpoint(api.study, "name")),
        Route("/api/studies/{name}/curves", endpoint(api.study_curves, "name")),
        Route("/api/studies/{name}/compare", endpoint(api.study_compare, "name")),
        Route("/api/runs/{run_id:int}", endpoint(api.run, "run_id")),
        Route("/api/runs/{run_id:int}/curves", endpoint(api.run_curves, "run_id")),
        Route("/api/runs/{run_id:int}/samples", endpoint(api.samples, "run_id")),
        Route("/api/runs/{run_id:int}/log", endpoint(api.log, "run_id")),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]

    async def not_found(request: Request, exc):
        return _error(getattr(exc, "status_code", 404), "not found")

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
    app.state.registry = registry
    app.add_middleware(Guard, bind_host=host, token=token)
    return app
