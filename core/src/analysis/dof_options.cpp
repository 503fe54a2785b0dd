// The DoF option tables (dof_options.h).
#include "attnscope/analysis/dof_options.h"

#include <cctype>

#include "attnscope/base/option_defs.h"

namespace attnscope {

void check_device_spec(const std::string& name) {
  if (name == "cpu" || name == "cuda") return;
  bool index = name.rfind("cuda:", 0) == 0 && name.size() > 5;
  for (size_t i = 5; index && i < name.size(); ++i) index = std::isdigit(static_cast<unsigned char>(name[i])) != 0;
  if (!index) fail_value(opt::device.quantity, "'" + name + "' is not one of cpu, cuda, cuda:N");
}

const OptionTable<DofSettings>& dof_option_table() {
  using D = DofSettings;
  static const OptionTable<D> rows = [] {
    Option<D> device = bind_checked(opt::device, &D::device, check_device_spec);
    device.help = "cpu, cuda or cuda:N; cuda solves every head of a layer at once";
    device.choices = {"cpu", "cuda"};
    return OptionTable<D>{
        described(bind(opt::lambda, &D::lambda, parse_lambda, lambda_arg), "tolerance lambda: 2^-8, 0.0625 or 1e-3"),
        described(bind(opt::dof_samples, &D::samples), "vectors sampled from the queries and keys of each head"),
        omitted_at_default(bind(opt::max_samples, &D::max_samples)),
        bind(opt::normalize, &D::normalize, parse_dof_normalize, dof_normalize_name, dof_normalize_names()),
        described(bind(opt::seed, &D::seed), "seed for sampling the vectors"),
        omitted_at_default(bind(opt::exact_limit, &D::exact_limit)),
        omitted_at_default(bind(opt::top_k, &D::top_k)),
        omitted_at_default(bind(opt::tolerance, &D::tolerance)),
        omitted_at_default(device),
        omitted_at_default(bind(opt::block, &D::block)),
    };
  }();
  return rows;
}

const OptionTable<DofCommand>& dof_command_option_table() {
  static const OptionTable<DofCommand> rows = [] {
    OptionTable<DofCommand> t = {
        described(bind(opt::capture, &DofCommand::capture), "capture directory (attnscope capture)"),
        bind(opt::spectra, &DofCommand::spectra),
    };
    for (const Option<DofSettings>& row : dof_option_table()) {
      if (row.flag() == "--block") continue;
      Option<DofCommand> r = nest(&DofCommand::settings, row);
      // From a spectra file only lambda counts: the rest is how they were computed.
      if (row.flag() != "--lambda") r = only_when(r, +[](const DofCommand& c) { return !c.capture.empty(); });
      t.push_back(r);
    }
    return t;
  }();
  return rows;
}

}  // namespace attnscope
