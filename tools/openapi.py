"""The OpenAPI 3.0 document of what `corral serve` answers (the subset of OpenAI's chat
completions API it serves, docs/design.md section 5), served at `/openapi.json`.

Request fields are described as `corral.tools.request` validates them (a body the document
allows may still be refused with a 400 or 422, e.g. a schema outside the subset); every
response, errors included, has the shape written here.
"""

from __future__ import annotations

from corral.tools.request import MAX_TOOLS

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}

_TEXT = {"type": "string", "nullable": True}
_FUNCTION = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "parameters": {"type": "object"},
        "strict": {"type": "boolean", "nullable": True},
    },
}
_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}
MESSAGE_IN = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": _TEXT,
        "name": {"type": "string"},
        "tool_calls": {"type": "array", "items": _CALL},
        "tool_call_id": {"type": "string"},
    },
}
REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "minItems": 1, "items": MESSAGE_IN},
        "max_tokens": {"type": "integer", "minimum": 1, "nullable": True},
        "max_completion_tokens": {"type": "integer", "minimum": 1, "nullable": True},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "nullable": True},
        "top_p": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1},
        "seed": {"type": "integer", "nullable": True},
        "stop": {
            "nullable": True,
            "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        },
        "n": {"type": "integer", "minimum": 1, "maximum": 128},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "logprobs": {"type": "boolean", "nullable": True},
        "top_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "nullable": True},
        "jump_forward": {"type": "boolean", "nullable": True},
        "stream": {"type": "boolean", "nullable": True},
        "stream_options": {
            "type": "object",
            "nullable": True,
            "properties": {"include_usage": {"type": "boolean"}},
        },
        "tools": {
            "type": "array",
            "maxItems": MAX_TOOLS,
            "items": {
                "type": "object",
                "required": ["type", "function"],
                "properties": {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": _FUNCTION,
                },
            },
        },
        "tool_choice": {
            "oneOf": [
                {"type": "string", "enum": ["none", "auto", "required"]},
                {
                    "type": "object",
                    "required": ["type", "function"],
                    "properties": {
                        "type": {"type": "string", "enum": ["function"]},
                        "function": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": {"type": "string"}},
                        },
                    },
                },
            ]
        },
        "parallel_tool_calls": {"type": "boolean"},
        "response_format": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
                "json_schema": {"type": "object"},
            },
        },
    },
}
_USAGE = {
    "type": "object",
    "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
    "properties": {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
    },
}
COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["chat.completion"]},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "message", "finish_reason", "logprobs"],
                "properties": {
                    "index": {"type": "integer"},
                    "message": {
                        "type": "object",
                        "required": ["role", "content"],
                        "properties": {
                            "role": {"type": "string", "enum": ["assistant"]},
                            "content": _TEXT,
                            "tool_calls": {"type": "array", "items": _CALL},
                        },
                    },
                    "finish_reason": {"type": "string", "enum": ["stop", "length", "tool_calls"]},
                    "logprobs": {"type": "object", "nullable": True},
                },
            },
        },
        "usage": _USAGE,
    },
}
MODEL = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["model"]},
        "created": {"type": "integer"},
        "owned_by": {"type": "string"},
    },
}
MODELS = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"type": "string", "enum": ["list"]},
        "data": {"type": "array", "items": MODEL},
    },
}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict:
    return {str(status): _json(ERROR, "an error in OpenAI's shape") for status in statuses}


def document(model_name: str) -> dict:
    """The OpenAPI 3.0.3 document, a JSON-ready dict."""
    chat_ok = _json(COMPLETION, "a chat completion, or server-sent chunks when `stream` is true")
    chat_ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    bearer = [{"bearer": []}]
    # the served model's name, or none: another is a 404 model_not_found
    model = {"type": "string", "enum": [model_name]}
    request = {**REQUEST, "properties": {**REQUEST["properties"], "model": model}}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "corral serve",
            "version": "1",
            "description": f"OpenAI-compatible chat completions with {model_name}.",
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "paths": {
            "/v1/chat/completions": {
                "post": {
                    "operationId": "createChatCompletion",
                    "security": bearer,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": request}},
                    },
                    "responses": {
                        "200": chat_ok,
                        **_errors(400, 401, 404, 413, 415, 422, 429, 500),
                    },
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "security": bearer,
                    "responses": {"200": _json(MODELS, "the served model"), **_errors(401)},
                }
            },
            "/v1/models/{model}": {
                "get": {
                    "operationId": "retrieveModel",
                    "security": bearer,
                    "parameters": [
                        {
                            "name": "model",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        "200": _json(MODEL, "the served model"),
                        **_errors(401, 404),
                    },
                }
            },
            "/health": {
                "get": {
                    "operationId": "health",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {"status": {"type": "string"}},
                            },
                            "the server is up",
                        )
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
    }
