"""The vault repository as a Dagster resource: the settings' vault_repo, vault_branch
and vault_max_note_bytes (LIBRARY_VAULT_*), held in the one settings resource.
"""

from library_pipeline.resources import SettingsResource
from library_pipeline.vault.git import GitError, GitRepo


class VaultResource(SettingsResource):
    """The Obsidian vault's git repository (bare, e.g. the push target, or with a work tree)."""

    @property
    def repo(self) -> str:
        return self.config.vault_repo or ""

    @property
    def max_note_bytes(self) -> int:
        return self.config.vault_max_note_bytes

    @property
    def configured(self) -> bool:
        return bool(self.repo)

    def open(self) -> GitRepo:
        if not self.repo:
            raise GitError("no vault configured: set LIBRARY_VAULT_REPO to the vault's git repository")
        return GitRepo(self.repo)

    def branch_name(self, repo: GitRepo) -> str:
        return self.config.vault_branch or repo.default_branch()

    def repo_id(self, repo: GitRepo) -> str:
        """The key of the repository in vault_state / vault_syncs."""
        return str(repo.path.resolve())
