"""Arguments and env values reach workers byte for byte through template substitution.

Both torchx (``${app_id}``-style macros in every argument and env value of a role) and
torchelastic (``${local_rank}`` in worker arguments) run ``string.Template.safe_substitute``
over what we hand them; doubling ``$`` makes either give back exactly what the user typed.
"""


def escape_template(value: str) -> str:
    return value.replace("$", "$$")
