#!/usr/bin/env python3
"""Renders the real chat templates in ../shared/chat-templates with transformers' own renderer
(jinja2 with apply_chat_template's settings) and writes tests/fixtures/chat_templates.json, the
oracle kvlm's Jinja interpreter is checked against.

    ~/kvlm-venv/bin/python tools/make_chat_template_fixtures.py [../shared/chat-templates]
"""
import json
import os
import sys

from transformers.utils.chat_template_utils import render_jinja_template

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello! What is a KV cache?"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Explain paging in one line."}],
    "multi_turn": [{"role": "system", "content": "You answer in French."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Bonjour !"},
                   {"role": "user", "content": "Count to 3, with \"quotes\" and 'apostrophes'\nand a newline."}],
    "assistant_last": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    "unicode": [{"role": "user", "content": "caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001F600  spaces  "}],
}
# Fixed so that templates which print today's date render the same on every day.
EXTRA = {"date_string": "26 Jul 2024"}
# Tool-use templates iterate over tools/documents (and firefunction prints `functions`): they get
# empty ones, which is what a server passes for a request without tools.
TOOL_EXTRA = {"tools": [], "documents": [], "functions": "[]"}
BOS, EOS = "<BOS>", "<EOS>"


def main(src):
    out = []
    for name in sorted(os.listdir(src)):
        if not name.endswith(".jinja"):
            continue
        template = open(os.path.join(src, name), encoding="utf-8").read()
        extra = dict(EXTRA, **(TOOL_EXTRA if "tool_use" in name or "firefunction" in name else {}))
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                case = {"template": name, "conversation": conv_name, "messages": messages, "add_generation_prompt": agp,
                        "bos_token": BOS, "eos_token": EOS, "extra": extra}
                try:
                    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                                        add_generation_prompt=agp, bos_token=BOS, eos_token=EOS,
                                                        **extra)
                    case["expected"] = rendered[0]
                except Exception as e:  # the template refuses this conversation: kvlm must refuse too
                    case["expected"] = None
                    case["error"] = f"{type(e).__name__}: {e}"
                out.append(case)
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures",
                        "chat_templates.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(f"{len(out)} renderings ({sum(c['expected'] is None for c in out)} refusals) -> {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "chat-templates"))
