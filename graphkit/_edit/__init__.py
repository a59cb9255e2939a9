"""Edit verbs: pure functions that take a Model and return a new, checked one, one module per family.

Every edit copies the model, checks everything it needs (unknown names get a did-you-mean hint), then
changes the copy and validates the result with onnx.checker and graphkit's structural checks. The input
Model is never changed. An edit that would change nothing returns the input Model itself (``result is
model`` tells), logging why; the undecorated function (``edit_fn.__wrapped__``) raises ``NoChangeError``
instead, which is how the CLI refuses no-op edits unless ``--allow-noop``.

Names are the public currency: nodes are named by their name (or ``#<index>`` for a main-graph node
without a unique name), tensors by their name. Renames and rewiring respect scopes: a tensor read
from an If/Loop/Scan body is renamed there too, unless the body defines the same name itself.

The families: ``attributes``; ``renames``; ``structure`` (insert, remove, bypass); ``values``
(initializers, Constant outputs, graph inputs); ``shapes`` (set_dims); ``opsets`` (set_op_type,
replace_op, set_opset); ``cleaning`` (the one dead-node removal, cleanup); ``merging``;
``graphsurgeon`` (the only importer of onnx_graphsurgeon); ``outputs`` (add and remove graph outputs);
``splice`` (replace_span). ``_common`` holds what they share, ``_opset_merge`` the one reconciliation
of two models' opset imports (merge, splice).
"""

from __future__ import annotations

from graphkit._edit.attributes import remove_attribute, set_attribute
from graphkit._edit.cleaning import cleanup
from graphkit._edit.graphsurgeon import from_graphsurgeon, to_graphsurgeon
from graphkit._edit.merging import merge
from graphkit._edit.opsets import replace_op, set_op_type, set_opset
from graphkit._edit.outputs import add_output, remove_output
from graphkit._edit.renames import rename_node, rename_pattern, rename_tensor
from graphkit._edit.shapes import replace_dim, set_dims
from graphkit._edit.splice import replace_span
from graphkit._edit.structure import bypass_node, insert_node, remove_node
from graphkit._edit.values import (
    constant_to_input,
    initializer_to_input,
    input_to_initializer,
    set_initializer,
)

__all__ = [
    "add_output",
    "bypass_node",
    "cleanup",
    "constant_to_input",
    "from_graphsurgeon",
    "initializer_to_input",
    "input_to_initializer",
    "insert_node",
    "merge",
    "remove_attribute",
    "remove_node",
    "remove_output",
    "rename_node",
    "rename_pattern",
    "rename_tensor",
    "replace_dim",
    "replace_op",
    "replace_span",
    "set_attribute",
    "set_dims",
    "set_initializer",
    "set_op_type",
    "set_opset",
    "to_graphsurgeon",
]
