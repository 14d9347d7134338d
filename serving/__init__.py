"""The read side of library-pipeline: search lanes, inventory, MCP server.

Never imports `library_pipeline` or `dagster`: it must deploy alone.
"""
