"""The reference Python stack for the REST benchmarks: FastAPI + pydantic + uvicorn with a JSON file store,
serving GET/POST /api/settings the way the reference app server does (session-key header check, settings
model validated by pydantic, load-merge-store through a JSON file read and written in a worker thread; the file
is replaced atomically, so concurrent requests never read a half-written file).

Usage: python3 reference.py PORT DATA_DIR KEY   (uvicorn with its default logging; works with pydantic 1 and 2)
"""

import asyncio
import json
import os
import sys
import threading
from typing import Any, Dict, Optional

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, SecretStr

PORT = int(sys.argv[1])
DATA_DIR = sys.argv[2]
KEY = sys.argv[3]
PATH = os.path.join(DATA_DIR, "settings.json")
NO_CACHE = {"cache-control": "no-cache, no-store, must-revalidate, max-age=0", "pragma": "no-cache", "expires": "0"}
SECRETS = ("llm_api_key", "search_api_key", "sandbox_api_key")


class Settings(BaseModel):
    language: Optional[str] = None
    agent: Optional[str] = None
    max_iterations: Optional[int] = None
    security_analyzer: Optional[str] = None
    confirmation_mode: Optional[bool] = None
    llm_model: Optional[str] = None
    llm_api_key: Optional[SecretStr] = None
    llm_base_url: Optional[str] = None
    remote_runtime_resource_factor: Optional[int] = None
    secrets_store: Optional[Dict[str, Any]] = None
    enable_default_condenser: bool = True
    enable_sound_notifications: bool = False
    enable_proactive_conversation_starters: bool = True
    enable_solvability_analysis: bool = True
    user_consents_to_analytics: Optional[bool] = None
    sandbox_base_container_image: Optional[str] = None
    sandbox_runtime_container_image: Optional[str] = None
    mcp_config: Optional[Dict[str, Any]] = None
    search_api_key: Optional[SecretStr] = None
    sandbox_api_key: Optional[SecretStr] = None
    max_budget_per_task: Optional[float] = None
    condenser_max_size: Optional[int] = None
    email: Optional[str] = None
    email_verified: Optional[bool] = None
    git_user_name: Optional[str] = None
    git_user_email: Optional[str] = None
    v1_enabled: Optional[bool] = None


class GETSettingsModel(Settings):
    provider_tokens_set: Dict[str, Optional[str]] = {}
    llm_api_key_set: bool = False
    search_api_key_set: bool = False


def dump(model: BaseModel, **kwargs: Any) -> Dict[str, Any]:
    return model.model_dump(**kwargs) if hasattr(model, "model_dump") else model.dict(**kwargs)


def read_store() -> Optional[Dict[str, Any]]:
    try:
        with open(PATH, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write_store(data: Dict[str, Any]) -> None:
    # Written aside and renamed over, so a concurrent read never sees a half-written file.
    tmp = f"{PATH}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, PATH)


def plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


app = FastAPI()


@app.middleware("http")
async def check_session_key(request: Request, call_next):
    if request.headers.get("x-session-api-key") != KEY:
        return JSONResponse(status_code=401, content={"detail": "Unauthorized"}, headers=NO_CACHE)
    return await call_next(request)


@app.get("/api/settings")
async def load_settings():
    raw = await asyncio.to_thread(read_store)
    if raw is None:
        return JSONResponse(status_code=404, content={"error": "Settings not found"}, headers=NO_CACHE)
    settings = Settings(**raw)
    view = dump(settings)
    for field in SECRETS:
        view[field] = None
    out = GETSettingsModel(
        **view,
        llm_api_key_set=settings.llm_api_key is not None,
        search_api_key_set=settings.search_api_key is not None,
    )
    return JSONResponse(content=dump(out), headers=NO_CACHE)


@app.post("/api/settings")
async def store_settings(settings: Settings):
    existing = await asyncio.to_thread(read_store) or {}
    merged = dict(existing)
    for field, value in dump(settings, exclude_unset=True).items():
        if field in SECRETS and value is None:
            continue
        merged[field] = plain(value)
    Settings(**merged)  # the stored document stays valid
    await asyncio.to_thread(write_store, merged)
    return JSONResponse(content={"message": "Settings stored"}, headers=NO_CACHE)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=PORT)
