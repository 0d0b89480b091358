"""The MCP gateway: keys' and teams' MCP allow-lists, and tool calls in the spend ledger."""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``keys.mcp`` and ``teams.mcp`` (null: every server and tool) and the spend record's
    ``mcp_server``, ``mcp_tool`` and ``mcp_bytes`` (null on a model request)."""
    op.add_column("keys", sa.Column("mcp", sa.JSON, nullable=True))
    op.add_column("teams", sa.Column("mcp", sa.JSON, nullable=True))
    op.add_column("spend", sa.Column("mcp_server", sa.String(128), nullable=True))
    op.add_column("spend", sa.Column("mcp_tool", sa.String(256), nullable=True))
    op.add_column("spend", sa.Column("mcp_bytes", sa.BigInteger, nullable=True))


def downgrade() -> None:
    """Drop the columns :func:`upgrade` added."""
    for column in ("mcp_bytes", "mcp_tool", "mcp_server"):
        op.drop_column("spend", column)
    op.drop_column("teams", "mcp")
    op.drop_column("keys", "mcp")
