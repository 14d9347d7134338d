"""The vault repository as a Dagster resource (settings from LIBRARY_VAULT_*)."""

import dagster as dg
from pydantic import Field

from library_pipeline.vault.git import GitError, GitRepo
from serving.settings import Settings


class VaultResource(dg.ConfigurableResource):
    """The Obsidian vault's git repository (bare, e.g. the push target, or with a work tree)."""

    repo: str = Field(default="", description="Path of the vault git repository (LIBRARY_VAULT_REPO); empty = no vault.")
    branch: str = Field(default="", description="Branch to index (LIBRARY_VAULT_BRANCH); empty = the repository's HEAD.")
    max_note_bytes: int = Field(default=2 * 1024 * 1024, description="Larger notes fail with a reason.")

    @classmethod
    def from_settings(cls, settings: Settings) -> "VaultResource":
        return cls(repo=str(settings.vault_repo or ""), branch=settings.vault_branch or "",
                   max_note_bytes=settings.vault_max_note_bytes)

    @property
    def configured(self) -> bool:
        return bool(self.repo)

    def open(self) -> GitRepo:
        if not self.repo:
            raise GitError("no vault configured: set LIBRARY_VAULT_REPO to the vault's git repository")
        return GitRepo(self.repo)

    def branch_name(self, repo: GitRepo) -> str:
        return self.branch or repo.default_branch()

    def repo_id(self, repo: GitRepo) -> str:
        """The key of the repository in vault_state / vault_syncs."""
        return str(repo.path.resolve())
