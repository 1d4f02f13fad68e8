"""The minimal physical Catalog: a workspace's DWH binding, physical snapshots taken
through SQLAlchemy's inspector, and sync runs whose exact removals are handed to
Memory's physical cleanup (see ``tht.catalog.service``)."""
