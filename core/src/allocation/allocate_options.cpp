// The allocation's option tables (allocate_options.h).
#include "attnscope/allocation/allocate_options.h"

#include "attnscope/analysis/dof_options.h"
#include "attnscope/base/option_defs.h"

namespace attnscope {

const OptionTable<AllocOptions>& alloc_option_table() {
  using A = AllocOptions;
  static const OptionTable<A> rows = {
      described(bind(opt::budget, &A::budget), "cost C, an integer: the mean feature dimension (e.g. the head dimension)"),
      described(bind(opt::strategy, &A::strategy, parse_alloc_strategy, alloc_strategy_name, alloc_strategy_names()),
                "fix | dof | dof-clip | per-head"),
      omitted_at_default(bind(opt::multiple_of, &A::multiple)),
  };
  return rows;
}

const OptionTable<StateBudget>& state_budget_option_table() {
  using B = StateBudget;
  static const OptionTable<B> rows = {
      omitted_at_default(bind(opt::state_budget, &B::bytes, 0)),
      omitted_at_default(bind(opt::state_share, &B::share)),
      omitted_at_default(described(bind(with_range(opt::context, whole_range(1, opt::kMaxTokens)), &B::context, 0),
                                   "tokens per sequence the state budget is counted at (default: the capture's window length)")),
      omitted_at_default(described(bind(opt::window, &B::window, 0),
                                   "with a state budget: the window W of the map heads (hybrid; 0: linear)")),
  };
  return rows;
}

const OptionTable<AllocateCommand>& allocate_command_option_table() {
  static const OptionTable<AllocateCommand> rows = [] {
    using C = AllocateCommand;
    OptionTable<C> t = {
        described(bind(opt::spectra, &C::spectra), "spectra saved by `attnscope dof --out`"),
        described(bind(opt::capture, &C::capture), "capture directory (computes the spectra)"),
    };
    for (const Option<DofSettings>& row : dof_option_table()) {
      if (row.flag() == "--block") continue;
      Option<C> r = nest(&C::dof, row);
      if (row.flag() != "--lambda") r = only_when(r, +[](const C& c) { return !c.capture.empty(); });
      t.push_back(r);
    }
    nest_rows(t, &C::alloc, alloc_option_table());
    for (const Option<StateBudget>& row : state_budget_option_table()) t.push_back(nest(&C::state, row));
    return t;
  }();
  return rows;
}

}  // namespace attnscope
