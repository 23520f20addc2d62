"""netio.analyze: RoCE fabric capture analysis (``netio-analyze``).

Entry points: ``netio.analyze.engine.analyze(paths, AnalysisOptions())`` → the JSON
document of ``netio.analyze.schema``; ``netio.analyze.report`` renders it as text,
JSON or PNG plots. The scenario generator that writes captures with their ground
truth is ``netio.scenario``.
"""
