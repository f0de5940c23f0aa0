"""What the pytest modules share: writers of fixtures in every format (``formats``, ``h5files``,
``zipcraft``), comparison and process helpers (``helpers``), and the torch datasets and entry
points that spawned processes import by name (``datasets``, ``torchdata``)."""
