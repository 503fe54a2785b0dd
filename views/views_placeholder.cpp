// attnscope_views collects the Qt widgets that draw core results; the first of them arrive with
// the GUI issue. This translation unit keeps the library target valid until then.
namespace attnscope::views {
int views_api_version() { return 1; }
}  // namespace attnscope::views
