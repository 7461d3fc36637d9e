"""Example schemas and tool definitions shared by more than one test module (importable as
`example_schemas`: tests/ is on sys.path)."""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
"""An OpenAI tool with a string, an enum and an integer argument, one of them required."""
