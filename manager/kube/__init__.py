"""The only code that talks to an apiserver.

Importing this package loads kubernetes_asyncio lean (`lean_import`), before any of its modules
imports it: the connection code kfed uses, without the generated models it never does.
"""

from manager.kube import lean_import

lean_import.load()
