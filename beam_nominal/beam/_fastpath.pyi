from typing import Any

class FastProcess:
    def process(self, element: Any, /) -> Any: ...
    def _bind_fast(
        self, batch: Any, points: set[type], rows: set[type], timestamp_field: str, limit: int, /
    ) -> None: ...
