"""netio.analyze: RoCE fabric capture analysis (``netio-analyze``) and its scenario generator.

Entry points: ``netio.analyze.engine.analyze(paths, AnalysisOptions())`` → the JSON
document of ``netio.analyze.schema``; ``netio.analyze.report`` renders it as text,
JSON or PNG plots; ``netio.analyze.scenario.generate(scenario, outdir)`` writes
captures and their ground truth (``netio.analyze.presets`` holds the built-ins).
"""
