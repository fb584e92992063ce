"""Every key the app answers to, read from the bindings the app and its panes declare:
the help screen and the command palette are built from them, so a new binding shows
in both with nothing else to edit."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from textual.actions import parse
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.dom import DOMNode
from textual.screen import Screen

from gpudiag.panes.base import Pane


def declared_bindings(node: DOMNode) -> list[Binding]:
    """The bindings a node's own classes declare (not Textual's defaults), base classes
    first; a key declared again by a subclass takes the place of the first."""
    by_key: dict[str, Binding] = {}
    for cls in reversed(type(node).__mro__):
        if cls.__module__.split(".")[0] == "textual":
            continue
        for binding in cls.__dict__.get("BINDINGS", ()):
            binding = binding if isinstance(binding, Binding) else Binding(*binding)
            by_key[binding.key] = binding
    return [b for b in by_key.values() if b.description and not b.system]


def screen_bindings(screen: Screen) -> Iterator[tuple[DOMNode, Binding]]:
    """The app's bindings, then each pane's in tab order, with the node that runs each."""
    yield from ((screen.app, binding) for binding in declared_bindings(screen.app))
    for pane in screen.query(Pane):
        yield from ((pane, binding) for binding in declared_bindings(pane))


def title(binding: Binding) -> str:
    """A binding's name in full, for the help screen and the palette: its tooltip where
    the footer's description is short for it ("Sort findings" for "Sort")."""
    return binding.tooltip or binding.description


def allowed(node: DOMNode, binding: Binding) -> bool:
    """Whether the node runs the binding's action now (its check_action)."""
    _, name, parameters = parse(binding.action)
    return bool(node.check_action(name, parameters))


def offered(node: DOMNode, binding: Binding) -> bool:
    """Whether the node ever runs the binding's action here: its `offers` where it has
    one (the app: `x` is offered on a node that measures, though refused until kernels
    run), else its check_action. A saved snapshot offers no refresh and no kernels."""
    _, name, parameters = parse(binding.action)
    ask = getattr(node, "offers", None) or node.check_action
    return bool(ask(name, parameters))


def help_columns(screen: Screen) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The help screen's two columns of (key, title): the screens, then the actions that
    do something here (`r`, `k`, `K`, `x`, `u` are not listed in `view`)."""
    screens: list[tuple[str, str]] = []
    actions: list[tuple[str, str]] = []
    for node, binding in screen_bindings(screen):
        if not offered(node, binding):
            continue
        key = screen.app.get_key_display(binding)
        if binding.action.startswith("show_tab("):
            screens.append((key, binding.description))
        else:
            actions.append((key, title(binding)))
    return screens, actions


class BindingCommands(Provider):
    """The command palette's commands: one per binding of the app and its panes (its
    name in full the command, its key the help), those refused here left out."""

    def _commands(self) -> Iterator[tuple[str, str, partial[object]]]:
        app = self.app
        taken = {command.title for command in app.get_system_commands(self.screen)}
        for node, binding in screen_bindings(self.screen):
            text = title(binding)
            if text in taken or not allowed(node, binding):
                continue
            taken.add(text)
            help_text = f"key {app.get_key_display(binding)}"
            yield text, help_text, partial(app.run_action, binding.action, node)

    async def discover(self) -> Hits:
        for text, help_text, command in self._commands():
            yield DiscoveryHit(text, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, help_text, command in self._commands():
            if (score := matcher.match(text)) > 0:
                yield Hit(score, matcher.highlight(text), command, text=text, help=help_text)
