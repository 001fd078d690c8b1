"""The recipe a watched job is held against (`gcdoctor analyze WATCHED --against DIAGNOSE`, `gcdoctor
watch --against DIAGNOSE -- CMD`): the diagnose run's recipe and what it was measured on."""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.facts.policies import RecipeChoice, RecipeConfirmation


@dataclass
class AgainstFacts:
    run_dir: str = ""  # the diagnose run directory, as given
    source: str = ""  # policy search | batch sweep (no policy search recorded)
    model: str = ""
    n_params: int | None = None
    device_name: str = ""
    seq_len: int | None = None
    dtype: str = ""
    recipe: RecipeChoice | None = None  # None: the diagnose run has no recipe (why in `reason`)
    confirmation: RecipeConfirmation | None = None  # the accepted one, if the recipe was confirmed
    reason: str = ""

    @property
    def tokens_per_s(self) -> float | None:
        """The recipe's tokens/s: confirmed where it was, else predicted."""
        if self.confirmation is not None and self.confirmation.tokens_per_s:
            return self.confirmation.tokens_per_s
        return self.recipe.predicted_tokens_per_s if self.recipe is not None else None
