"""``ltr report``: the paper's tables and figures, rebuilt from the tracked runs.

Which grid: ``--run-id`` (a grid's parent run in ``--experiment``), else the
experiment's latest FINISHED grid parent run. A mistyped experiment is an error
(the existing ones are listed); the report never creates one. A grid whose parent
is not FINISHED, or whose children are not all finished, is still reported, from
its finished children, with a warning at the top saying what is missing.

From the FINISHED children of that grid's parent run (MLflow):

* **Table 1**: NDCG@k on test after the last tree, mean and sample standard
  deviation (ddof 1) over the folds, for the baseline and every strategy and switch
  point. Every cell says over how many of the grid's folds it averages: a cell
  short of folds (a child missing or unfinished) is marked ``[k/n folds]``.
* **Significance**: every row of Table 1 against LambdaMART, paired per test
  query over the folds both finished (the same query ids in both runs of a fold,
  else an error; one difference per query, folds pooled): two-sided paired t-test
  (``scipy.stats.ttest_rel``) and two-sided randomisation test
  (``scipy.stats.permutation_test``, paired: signs flipped within pairs, statistic
  the mean difference, ``report.permutations`` resamples seeded with
  ``report.seed``; exact when 2^queries is fewer). p-values raw and Holm-corrected
  (Holm-Bonferroni step-down over all the comparisons, each test separately).
* **Table 2**: the best MSE-t, chosen on *validation* (highest mean over folds of
  the final vali NDCG, so the choice does not peek at test), at model sizes n
  (``report.table2_sizes``; empty: three sizes chosen on validation up to the
  last size at which LambdaMART can still reach MSE-t within T trees, see
  :func:`default_table2_sizes`): its mean test NDCG at n trees, the smallest
  number of trees at which LambdaMART's mean test NDCG reaches it, and the size
  ratio. LambdaMART's curve ends at T trees: a row it never reaches says ``> T``
  (and the ratio ``> T/n``). Means over the folds both finished.
* **Figure 1**: NDCG@k on test (mean over folds) against the number of trees,
  baseline against every MSE-t.
* **Figure 2**: after ``tree`` trees, the distribution of test scores of the
  least and the most relevant documents, for MSE (an MSE-t with t >= tree, so
  still pure MSE at that point) and for LambdaMART, with
  KL(P_lowest || P_highest) (``scipy.stats.entropy``, natural log) on the
  trainer's histogram bins (100 bins over the score range, 0.5 added to every
  bin count so that empty bins stay finite).

The header states the metric conventions, the dataset fingerprint, the code
versions of the children (their ``code.*`` params; a warning when they differ)
and of the report itself. Output: ``report.md``, ``report.html``, PNG figures and
JSON tables in ``--out``, also logged to the parent run under ``report/``.
"""

from pipelines.report.build import build_report
from pipelines.report.loading import open_tracker
from pipelines.report.records import ReportError

__all__ = ["ReportError", "build_report", "open_tracker"]
