"""The import graph of pushmask (grimp: every import statement, those inside functions included;
those under `if TYPE_CHECKING:` left out, since they never run) and its cycles: each strongly
connected set of modules, printed with one import chain around it. Exits 1 if there is any."""

from __future__ import annotations

import sys

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: the graph is small but deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.find_modules_directly_imported_by(successor)))))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def main() -> int:
    graph = grimp.build_graph("pushmask", exclude_type_checking_imports=True, cache_dir=None)
    imports = sum(len(graph.find_modules_directly_imported_by(module)) for module in graph.modules)
    components = strongly_connected(graph)
    print(f"pushmask: {len(graph.modules)} modules, {imports} imports between them, {len(components)} cycles")
    for component in components:
        print(f"cycle of {len(component)} modules:")
        for module in component:
            inside = sorted(set(graph.find_modules_directly_imported_by(module)) & set(component))
            print(f"  {module} -> {', '.join(inside)}")
    return 1 if components else 0


if __name__ == "__main__":
    sys.exit(main())
