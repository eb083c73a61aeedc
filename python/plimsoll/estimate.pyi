from typing import Any, Dict, Optional, Sequence, Union

def batch(shape: Union[str, Sequence[int]], batch: int, dtype: str = "float32", queue: int = 10, workers: int = 4,
          budget: Optional[Union[int, str]] = None) -> Dict[str, Any]: ...
